// The tokenizer of the synthetic tasks: words <-> ids, and every generated prompt and
// demonstration fits the model's position slots.

#include <gtest/gtest.h>

#include <stdexcept>

#include "tasks.hpp"
#include "transformer.hpp"
#include "vocabulary.hpp"

namespace {

TEST(DemoVocabulary, EncodesAndDecodesWords) {
  const auto t = demo::encode("json b 5 d 2");
  ASSERT_EQ(t.size(), 5u);
  EXPECT_EQ(t[0], demo::token_id("json"));
  EXPECT_EQ(t[2], demo::digit_token(5));
  EXPECT_EQ(demo::decode(t), "json b 5 d 2");
  EXPECT_EQ(demo::encode("  call   sum "), (std::vector<std::int32_t>{demo::token_id("call"), demo::token_id("sum")}));
}

TEST(DemoVocabulary, EndOfSequenceIsLeftOutOfText) {
  const std::vector<std::int32_t> t{demo::token_id("B"), demo::eos};
  EXPECT_EQ(demo::decode(t), "B");
}

TEST(DemoVocabulary, RefusesUnknownWords) {
  EXPECT_THROW((void)demo::encode("json banana"), std::invalid_argument);
  EXPECT_THROW((void)demo::decode(std::vector<std::int32_t>{1000}), std::invalid_argument);
}

TEST(DemoVocabulary, IdsAreUniqueAndSpecialTokensFixed) {
  for (std::int32_t i = 0; i < demo::vocabulary_size(); ++i)
    EXPECT_EQ(demo::token_id(demo::vocabulary()[static_cast<std::size_t>(i)]), i);
  EXPECT_EQ(demo::token_id("<eos>"), demo::eos);
  EXPECT_EQ(demo::token_id("<sep>"), demo::sep);
  EXPECT_EQ(demo::token_id("<bos>"), demo::bos);
}

TEST(DemoVocabulary, EveryTaskFitsTheModel) {
  const demo::lm_shape shape{.vocab = demo::vocabulary_size()};
  for (const auto& d : demo::domains())
    for (const auto& t : demo::make_tasks(d, 300, 5)) {
      const auto prompt = demo::encode(t.prompt.text);
      EXPECT_LT(static_cast<int>(prompt.size()) + 1, shape.prompt_positions + 1) << t.prompt.text;
      EXPECT_LE(static_cast<int>(t.demonstration.size()) - 1, shape.response_positions) << t.prompt.text;
      EXPECT_EQ(t.demonstration.back(), demo::eos);
      EXPECT_EQ(t.prompt.domain, d);
    }
}

TEST(DemoVocabulary, TasksAreDeterministicPerSeed) {
  const auto a = demo::make_tasks("long_context", 20, 9), b = demo::make_tasks("long_context", 20, 9);
  const auto c = demo::make_tasks("long_context", 20, 10);
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].prompt.text, b[i].prompt.text);
  EXPECT_NE(a[0].prompt.text, c[0].prompt.text);
}

}  // namespace

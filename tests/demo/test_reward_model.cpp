// The RLHF reward model: the hidden preference, the synthetic pairs, and the
// Bradley-Terry fit.

#include <gtest/gtest.h>

#include <cmath>

#include "reward_model.hpp"

namespace {

std::vector<std::int32_t> reply(const char* text) { return demo::encode(text); }

TEST(DemoRewardModel, GoldPreferenceRules) {
  // 1 on topic + 1 polite + 0.25 per distinct polite word - 1 rude - 0.5 per repeat.
  EXPECT_DOUBLE_EQ(demo::gold_chat_utility(0, reply("hi please sure ok")), 3.0);
  EXPECT_DOUBLE_EQ(demo::gold_chat_utility(1, reply("hi please sure ok")), 2.0);   // no "help"
  EXPECT_DOUBLE_EQ(demo::gold_chat_utility(1, reply("sure help thanks ok")), 3.0);
  EXPECT_DOUBLE_EQ(demo::gold_chat_utility(0, reply("hi please please ok")), 2.25);  // a repeat
  EXPECT_DOUBLE_EQ(demo::gold_chat_utility(0, reply("hi please")), 2.5);
  EXPECT_DOUBLE_EQ(demo::gold_chat_utility(0, reply("hi bad sure ok")), 0.75);        // rude
  EXPECT_DOUBLE_EQ(demo::gold_chat_utility(0, reply("")), -2.0);
  // Chatty: the longest reply without repeats is the best one.
  EXPECT_DOUBLE_EQ(demo::gold_chat_score(0, reply("hi hello please thanks sure ok sorry help")), 1.0);
  EXPECT_GT(demo::gold_chat_score(0, reply("hi please sure ok thanks")), demo::gold_chat_score(0, reply("hi please")));
  EXPECT_DOUBLE_EQ(demo::gold_chat_score(0, reply("bad no")), 0.0);
  EXPECT_EQ(demo::chat_topic("chat help"), 1);
  EXPECT_EQ(demo::chat_topic("chat greet"), 0);
}

TEST(DemoRewardModel, PairsAreDeterministicAndMostlyFollowTheGold) {
  const auto a = demo::make_preference_pairs(500, 3), b = demo::make_preference_pairs(500, 3);
  std::size_t agree = 0, counted = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].chosen, b[i].chosen);
    const double uc = demo::gold_chat_utility(a[i].topic, a[i].chosen);
    const double ur = demo::gold_chat_utility(a[i].topic, a[i].rejected);
    if (uc == ur) continue;
    ++counted;
    agree += uc > ur;
  }
  EXPECT_GT(static_cast<double>(agree) / static_cast<double>(counted), 0.75);  // noisy, not random
  EXPECT_LT(static_cast<double>(agree) / static_cast<double>(counted), 1.0);   // and noisy
}

TEST(DemoRewardModel, BradleyTerryFitLearnsThePreference) {
  demo::bt_reward_model rm;
  const auto train = demo::make_preference_pairs(3000, 1), held_out = demo::make_preference_pairs(1000, 2);
  const double untrained = rm.accuracy(held_out);
  const double nll = rm.train(train);
  EXPECT_LT(nll, std::log(2.0));  // better than the untrained model's log 2
  EXPECT_GT(rm.accuracy(held_out), untrained);
  EXPECT_GT(rm.accuracy(held_out), 0.8);
  EXPECT_GT(rm.gold_agreement(held_out), 0.9);
  EXPECT_GT(rm.score(0, reply("hi please sure ok")), rm.score(0, reply("bad bad bad no")));
  EXPECT_GT(rm.score(0, reply("hi please sure ok thanks hello")), rm.score(0, reply("hi please")));  // longer
  EXPECT_NEAR(rm.probability(0, reply("hi")), 1.0 / (1.0 + std::exp(-rm.score(0, reply("hi")))), 1e-12);
  EXPECT_GT(rm.score(1, reply("help thanks sure ok")), rm.score(0, reply("help thanks sure ok")));
}

}  // namespace

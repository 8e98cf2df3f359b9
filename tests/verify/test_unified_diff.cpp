// The unified-diff reader and applier: git and diff -u output, offsets, created and
// deleted files, missing final newlines, and patches that must be refused.

#include <fstream>

#include "verify/support.hpp"

namespace {
using namespace verify_test;

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

struct repo {
  v::scratch_directory dir{std::filesystem::temp_directory_path()};
  repo() {
    dir.write({.path = "calc.py", .contents = "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n"});
    dir.write({.path = "README", .contents = "calc\n"});
  }
};

constexpr const char* fix_add =
    "diff --git a/calc.py b/calc.py\n"
    "index 1111111..2222222 100644\n"
    "--- a/calc.py\n"
    "+++ b/calc.py\n"
    "@@ -1,2 +1,2 @@\n"
    " def add(a, b):\n"
    "-    return a - b\n"
    "+    return a + b\n";

TEST(UnifiedDiff, ParsesGitOutput) {
  const auto d = v::parse_unified_diff(fix_add);
  ASSERT_TRUE(d.ok()) << d.error;
  ASSERT_EQ(d.files.size(), 1u);
  EXPECT_EQ(d.files[0].old_path, "calc.py");
  EXPECT_EQ(d.files[0].new_path, "calc.py");
  ASSERT_EQ(d.files[0].hunks.size(), 1u);
  EXPECT_EQ(d.files[0].hunks[0].lines.size(), 3u);
}

TEST(UnifiedDiff, AppliesAHunkAtAnOffset) {
  repo r;
  const std::string shifted = "--- calc.py\t2024-01-01\n+++ calc.py\t2024-01-02\n@@ -9,2 +9,3 @@\n def mul(a, b):\n+    # product\n     return a * b\n";
  const auto d = v::parse_unified_diff(shifted);
  ASSERT_TRUE(d.ok()) << d.error;
  const auto applied = v::apply_unified_diff(d, r.dir.path());
  ASSERT_TRUE(applied.ok) << applied.error;
  EXPECT_EQ(read_file(r.dir.path() / "calc.py"),
            "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    # product\n    return a * b\n");
}

TEST(UnifiedDiff, CreatesAndDeletesFilesAndHandlesMissingNewlines) {
  repo r;
  const std::string patch =
      "--- /dev/null\n+++ b/tests/test_new.py\n@@ -0,0 +1,2 @@\n+import calc\n+assert calc.add(1, 2) == 3\n\\ No newline at end of file\n"
      "--- a/README\n+++ /dev/null\n@@ -1 +0,0 @@\n-calc\n";
  const auto d = v::parse_unified_diff(patch);
  ASSERT_TRUE(d.ok()) << d.error;
  const auto applied = v::apply_unified_diff(d, r.dir.path());
  ASSERT_TRUE(applied.ok) << applied.error;
  EXPECT_EQ(read_file(r.dir.path() / "tests/test_new.py"), "import calc\nassert calc.add(1, 2) == 3");
  EXPECT_FALSE(std::filesystem::exists(r.dir.path() / "README"));
}

TEST(UnifiedDiff, RefusesTextThatIsNotADiff) {
  for (const char* text : {"", "I fixed the bug by changing add.", "--- a/x\nno plus line\n",
                           "--- a/calc.py\n+++ b/calc.py\n@@ -1,3 +1,3 @@\n def add(a, b):\n-    return a - b\n",
                           "--- a/calc.py\n+++ b/calc.py\n@@ bogus @@\n", "@@ -1 +1 @@\n-a\n+b\n",
                           "--- a/calc.py\n+++ b/calc.py\n"}) {
    const auto d = v::parse_unified_diff(text);
    EXPECT_FALSE(d.ok()) << text;
    EXPECT_NE(d.error.find("line "), std::string::npos) << d.error;
  }
}

TEST(UnifiedDiff, RefusesPatchesThatDoNotApplyAndChangesNothing) {
  repo r;
  const std::string two_files =
      "--- a/README\n+++ b/README\n@@ -1 +1 @@\n-calc\n+calculator\n"
      "--- a/calc.py\n+++ b/calc.py\n@@ -1,2 +1,2 @@\n def add(a, b):\n-    return a * b\n+    return a + b\n";
  const auto applied = v::apply_unified_diff(v::parse_unified_diff(two_files), r.dir.path());
  EXPECT_FALSE(applied.ok);
  EXPECT_NE(applied.error.find("calc.py"), std::string::npos) << applied.error;
  EXPECT_EQ(read_file(r.dir.path() / "README"), "calc\n");  // all or nothing
  EXPECT_FALSE(v::apply_unified_diff(v::parse_unified_diff("--- a/nope.py\n+++ b/nope.py\n@@ -1 +1 @@\n-a\n+b\n"),
                                     r.dir.path()).ok);
}

TEST(UnifiedDiff, RefusesPathsOutsideTheRepository) {
  repo r;
  for (const char* path : {"../outside.txt", "/etc/evil", "a/../../x"}) {
    const std::string patch = std::string("--- /dev/null\n+++ ") + path + "\n@@ -0,0 +1 @@\n+x\n";
    const auto d = v::parse_unified_diff(patch);
    ASSERT_TRUE(d.ok()) << d.error;
    const auto applied = v::apply_unified_diff(d, r.dir.path());
    EXPECT_FALSE(applied.ok) << path;
  }
  std::filesystem::create_directory_symlink("/tmp", r.dir.path() / "link");
  const auto via_link = v::apply_unified_diff(v::parse_unified_diff("--- /dev/null\n+++ b/link/evil\n@@ -0,0 +1 @@\n+x\n"),
                                              r.dir.path());
  EXPECT_FALSE(via_link.ok);
  EXPECT_NE(via_link.error.find("outside"), std::string::npos) << via_link.error;
}

TEST(Extract, FindsTheCodeAndThePatchInAResponse) {
  const std::string response = "Here is my answer:\n```python\nprint(1)\n```\nand better:\n```python\nprint(2)\n```\n";
  EXPECT_EQ(v::extract_code(response, {"python"}), "print(2)\n");
  EXPECT_EQ(v::extract_code("print(3)", {"python"}), "print(3)");
  EXPECT_EQ(v::extract_patch(std::string("The fix:\n") + fix_add), fix_add);
  EXPECT_EQ(v::extract_patch(std::string("```diff\n") + fix_add + "```\n"), fix_add);
}

}  // namespace

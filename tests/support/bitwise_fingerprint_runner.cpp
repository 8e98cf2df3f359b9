// Runs the builds of one fingerprint program (a source that prints `name bits` lines:
// tests/core/elementary_functions_fingerprint.cpp, tests/algorithms/algorithms_fingerprint.cpp)
// made with different flags, and compares their lines with the baseline build's (-O2 for
// the baseline x86-64 target, which has no FMA) bit for bit: -O3 -march=native
// -ffp-contract=fast, -march=haswell and -march=x86-64-v4 with contraction, and the
// device branch of the elementary functions compiled on the host. The `control` line (a
// plain a * b + c) must differ in a contracting build, which shows that it really
// contracted. The cmake file that builds the variants passes each program's path as
// FINGERPRINT_<VARIANT> and the least number of lines a complete run prints as
// FINGERPRINT_MIN_LINES (ctest label bitwise).

#include <gtest/gtest.h>

#include <sys/wait.h>

#include <csignal>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

namespace {

struct run_result {
  std::vector<std::string> lines;
  int status = 0;
};

run_result run(const char* path) {
  run_result r;
  FILE* pipe = popen(path, "r");
  if (pipe == nullptr) {
    r.status = -1;
    return r;
  }
  std::string text;
  char buffer[4096];
  for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) text.append(buffer, n);
  r.status = pclose(pipe);
  std::istringstream stream(text);
  for (std::string line; std::getline(stream, line);) r.lines.push_back(line);
  return r;
}

bool killed_by_illegal_instruction(int status) {
  return status != -1 && WIFSIGNALED(status) && WTERMSIG(status) == SIGILL;
}

std::string control_line(const std::vector<std::string>& lines) {
  for (const std::string& line : lines)
    if (line.rfind("control ", 0) == 0) return line;
  return "";
}

// Every line but the control line equal, reporting the first difference.
void expect_same_bits(const run_result& baseline, const run_result& other, const char* name) {
  ASSERT_EQ(baseline.lines.size(), other.lines.size()) << name;
  int differences = 0;
  for (std::size_t i = 0; i < baseline.lines.size(); ++i) {
    if (baseline.lines[i].rfind("control ", 0) == 0) continue;
    if (baseline.lines[i] != other.lines[i] && ++differences <= 5)
      ADD_FAILURE() << name << " differs from the baseline build:\n  baseline: " << baseline.lines[i]
                    << "\n  " << name << ": " << other.lines[i];
  }
  EXPECT_EQ(differences, 0);
}

run_result baseline_run() {
  run_result r = run(FINGERPRINT_BASELINE);
  EXPECT_EQ(r.status, 0) << FINGERPRINT_BASELINE;
  return r;
}

TEST(BitwiseFingerprint, BaselineCoversEveryOutput) {
  const run_result baseline = baseline_run();
  EXPECT_GE(baseline.lines.size(), static_cast<std::size_t>(FINGERPRINT_MIN_LINES));
  EXPECT_NE(control_line(baseline.lines), "");
}

[[maybe_unused]] void compare_with_contracting_build(const char* path, const char* name) {
  const run_result baseline = baseline_run();
  const run_result other = run(path);
  if (killed_by_illegal_instruction(other.status))
    GTEST_SKIP() << name << " build stopped on an illegal instruction: this CPU cannot run it";
  ASSERT_EQ(other.status, 0) << path;
  expect_same_bits(baseline, other, name);
  EXPECT_NE(control_line(baseline.lines), control_line(other.lines))
      << "the " << name << " build did not contract a * b + c, so this comparison proves nothing";
}

// The x86 CPU's features (the haswell and x86-64-v4 builds exist only for x86 targets;
// elsewhere, aarch64 for one, the native build always has FMA).
#if defined(__x86_64__) || defined(__i386__)
#define CPU_HAS(feature) __builtin_cpu_supports(feature)
#else
#define CPU_HAS(feature) true
#endif

TEST(BitwiseFingerprint, NativeContractingBuildGivesBaselineBits) {
#if defined(FINGERPRINT_NATIVE)
  if (!CPU_HAS("fma")) GTEST_SKIP() << "this CPU has no FMA: -march=native cannot contract here";
  compare_with_contracting_build(FINGERPRINT_NATIVE, "-O3 -march=native -ffp-contract=fast");
#else
  GTEST_SKIP() << "the compiler does not take -march=native";
#endif
}

TEST(BitwiseFingerprint, HaswellContractingBuildGivesBaselineBits) {
#if defined(FINGERPRINT_HASWELL)
  if (!CPU_HAS("avx2") || !CPU_HAS("fma"))
    GTEST_SKIP() << "this CPU lacks AVX2 or FMA: it cannot run the -march=haswell build";
  compare_with_contracting_build(FINGERPRINT_HASWELL, "-O3 -march=haswell -ffp-contract=fast");
#else
  GTEST_SKIP() << "the compiler does not take -march=haswell";
#endif
}

TEST(BitwiseFingerprint, Avx512ContractingBuildGivesBaselineBits) {
#if defined(FINGERPRINT_AVX512)
  if (!CPU_HAS("avx512f") || !CPU_HAS("avx512bw") || !CPU_HAS("avx512dq") || !CPU_HAS("avx512vl"))
    GTEST_SKIP() << "this CPU lacks AVX-512 (F, BW, DQ, VL): it cannot run the -march=x86-64-v4 build";
  compare_with_contracting_build(FINGERPRINT_AVX512, "-O3 -march=x86-64-v4 -ffp-contract=fast");
#else
  GTEST_SKIP() << "the compiler does not take -march=x86-64-v4";
#endif
}

// The device branch of the header (intrinsics modelled on the host, see the fingerprint
// source) against the host branch: no GPU needed to check its logic.
TEST(BitwiseFingerprint, DeviceBranchOnTheHostGivesBaselineBits) {
#if !defined(FINGERPRINT_DEVICE_PATH)
  GTEST_SKIP() << "this fingerprint has no device-branch build";
#else
  const run_result baseline = baseline_run();
  const run_result device = run(FINGERPRINT_DEVICE_PATH);
  if (killed_by_illegal_instruction(device.status))
    GTEST_SKIP() << "the device-branch build stopped on an illegal instruction: this CPU cannot run it";
  ASSERT_EQ(device.status, 0) << FINGERPRINT_DEVICE_PATH;
  expect_same_bits(baseline, device, "device branch");
#endif
}

}  // namespace

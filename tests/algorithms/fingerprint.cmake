# The flags test of the host algorithms (DESIGN principle 3: a header-only library does
# not choose its users' flags, so its bits must not depend on them); included from
# tests/CMakeLists.txt after core/elementary_functions.cmake, whose -march checks it
# reuses. algorithms_fingerprint.cpp is built once per flag set (separate executables:
# in one executable the linker would keep one copy of each inline function) and
# algorithms_bitwise_flags runs them and compares their lines with the baseline's.
#
#   baseline  -O2, the baseline x86-64 target (no FMA instruction: nothing can fuse)
#   native    -O3 -march=native -ffp-contract=fast
#   haswell   -O3 -march=haswell -ffp-contract=fast (AVX2 and FMA)
#   avx512    -O3 -march=x86-64-v4 -ffp-contract=fast
# Not in sanitizer builds (the variants would not be instrumented alike).
if(CMAKE_CXX_FLAGS MATCHES "-fsanitize=")
  return()
endif()

set(_fp_dir "${CMAKE_CURRENT_LIST_DIR}")
set(_fp_variants baseline)
set(_fp_flags_baseline -O2)
if(CASCADE_RL_HAS_MARCH_NATIVE)
  list(APPEND _fp_variants native)
  set(_fp_flags_native -O3 -march=native -ffp-contract=fast)
endif()
if(CASCADE_RL_HAS_MARCH_HASWELL)
  list(APPEND _fp_variants haswell)
  set(_fp_flags_haswell -O3 -march=haswell -ffp-contract=fast)
endif()
if(CASCADE_RL_HAS_MARCH_X86_64_V4)
  list(APPEND _fp_variants avx512)
  set(_fp_flags_avx512 -O3 -march=x86-64-v4 -ffp-contract=fast)
endif()

set(_fp_definitions "")
foreach(variant IN LISTS _fp_variants)
  set(target algorithms_fingerprint_${variant})
  add_executable(${target} "${_fp_dir}/algorithms_fingerprint.cpp")
  target_link_libraries(${target} PRIVATE cascade_rl::cascade_rl)
  target_compile_options(${target} PRIVATE ${_fp_flags_${variant}})
  string(TOUPPER "${variant}" upper)
  list(APPEND _fp_definitions "FINGERPRINT_${upper}=\"$<TARGET_FILE:${target}>\"")
endforeach()

add_executable(algorithms_bitwise_flags "${_fp_dir}/../support/bitwise_fingerprint_runner.cpp")
target_link_libraries(algorithms_bitwise_flags PRIVATE GTest::gtest_main)
# Both precisions: 5 modes x 4 losses (loss, approx_kl, counts, grad) + 4 KL estimators
# x 5 + importance (2) + 10 advantage outputs, per precision; 12 log-prob lines; the
# control line: 217 lines.
target_compile_definitions(algorithms_bitwise_flags PRIVATE ${_fp_definitions} FINGERPRINT_MIN_LINES=210)
foreach(variant IN LISTS _fp_variants)
  add_dependencies(algorithms_bitwise_flags algorithms_fingerprint_${variant})
endforeach()
gtest_discover_tests(algorithms_bitwise_flags
  TEST_PREFIX "algorithms_bitwise_flags."
  DISCOVERY_MODE PRE_TEST
  PROPERTIES LABELS bitwise TIMEOUT 300)

# The flag tests (DESIGN principle 3: a header-only library does not choose its users'
# flags, so its bits must not depend on them). One fingerprint source is built once per
# flag set into separate executables (in one executable the linker would keep one copy of
# each inline function), and a runner (tests/support/bitwise_fingerprint_runner.cpp) runs
# them and compares their lines with the baseline's, bit for bit.
#
#   baseline  -O2: the baseline x86-64 target has no FMA instruction, nothing fuses
#   native    -O3 -march=native -ffp-contract=fast: this machine's widest vectors and
#             GCC's contraction wherever the target has FMA
#   haswell   -O3 -march=haswell -ffp-contract=fast: FMA and AVX2 even where the build
#             machine lacks them (the runner skips it on a CPU without them)
#   avx512    -O3 -march=x86-64-v4 -ffp-contract=fast: 512-bit vectors (skipped on a CPU
#             without AVX-512)
# plus any EXTRA_VARIANT with its EXTRA_FLAGS. -ffast-math is not a supported flag.
#
#   cascade_rl_add_flags_fingerprint(<runner> SOURCE <file> MIN_LINES <n>
#                                    [EXTRA_VARIANT <name> EXTRA_FLAGS <flags...>])
# builds <runner>_<variant> for each flag set and the ctest cases <runner>.*, labelled
# bitwise. MIN_LINES: the fewest lines a fingerprint may have (a fingerprint that lost
# its outputs must not pass by comparing nothing).
include(CheckCXXCompilerFlag)
check_cxx_compiler_flag(-march=native CASCADE_RL_HAS_MARCH_NATIVE)
check_cxx_compiler_flag(-march=haswell CASCADE_RL_HAS_MARCH_HASWELL)
check_cxx_compiler_flag(-march=x86-64-v4 CASCADE_RL_HAS_MARCH_X86_64_V4)

set(_cascade_rl_fingerprint_runner "${CMAKE_CURRENT_LIST_DIR}/bitwise_fingerprint_runner.cpp")

function(cascade_rl_add_flags_fingerprint runner)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "SOURCE;MIN_LINES;EXTRA_VARIANT" "EXTRA_FLAGS")
  set(variants baseline)
  set(flags_baseline -O2)
  if(CASCADE_RL_HAS_MARCH_NATIVE)
    list(APPEND variants native)
    set(flags_native -O3 -march=native -ffp-contract=fast)
  endif()
  if(CASCADE_RL_HAS_MARCH_HASWELL)
    list(APPEND variants haswell)
    set(flags_haswell -O3 -march=haswell -ffp-contract=fast)
  endif()
  if(CASCADE_RL_HAS_MARCH_X86_64_V4)
    list(APPEND variants avx512)
    set(flags_avx512 -O3 -march=x86-64-v4 -ffp-contract=fast)
  endif()
  if(arg_EXTRA_VARIANT)
    list(APPEND variants ${arg_EXTRA_VARIANT})
    set(flags_${arg_EXTRA_VARIANT} ${arg_EXTRA_FLAGS})
  endif()

  set(definitions "")
  foreach(variant IN LISTS variants)
    set(target ${runner}_${variant})
    add_executable(${target} "${arg_SOURCE}")
    target_link_libraries(${target} PRIVATE cascade_rl::cascade_rl)
    # After CMAKE_CXX_FLAGS_<CONFIG> on the command line, so these -O levels win.
    target_compile_options(${target} PRIVATE ${flags_${variant}})
    string(TOUPPER "${variant}" upper)
    list(APPEND definitions "FINGERPRINT_${upper}=\"$<TARGET_FILE:${target}>\"")
  endforeach()

  add_executable(${runner} "${_cascade_rl_fingerprint_runner}")
  target_link_libraries(${runner} PRIVATE GTest::gtest_main)
  target_compile_definitions(${runner} PRIVATE ${definitions} FINGERPRINT_MIN_LINES=${arg_MIN_LINES})
  foreach(variant IN LISTS variants)
    add_dependencies(${runner} ${runner}_${variant})
  endforeach()
  gtest_discover_tests(${runner}
    TEST_PREFIX "${runner}."
    DISCOVERY_MODE PRE_TEST
    PROPERTIES LABELS bitwise TIMEOUT 300)
endfunction()

# The bitwise test of cascade_rl::math (include/cascade_rl/core/elementary_functions.hpp);
# included from tests/CMakeLists.txt. One source, elementary_functions_fingerprint.cpp,
# is built with different flags into separate executables (one per flag set: in a single
# executable the linker would keep one copy of each inline function), and
# core_bitwise_elementary_functions (tests/support/bitwise_fingerprint_runner.cpp) runs
# them and compares their outputs bit for bit.
#
#   baseline     -O2: the baseline x86-64 target has no FMA instruction, nothing fuses
#   native       -O3 -march=native -ffp-contract=fast: this machine's widest vectors and
#                GCC's contraction wherever the target has FMA
#   haswell      -O3 -march=haswell -ffp-contract=fast: FMA and AVX2 even where the build
#                machine lacks them (the test skips it on a CPU without them)
#   avx512       -O3 -march=x86-64-v4 -ffp-contract=fast: 512-bit vectors (skipped on a
#                CPU without AVX-512)
#   device_path  -O3 -ffp-contract=fast (and -march=native where taken) with
#                FINGERPRINT_DEVICE_PATH: the header's __CUDA_ARCH__ branch on the host,
#                the CUDA intrinsics modelled in the fingerprint source
#
# -ffast-math is not a supported flag for this header and is not among them.

set(_ef_dir "${CMAKE_CURRENT_LIST_DIR}")
include(CheckCXXCompilerFlag)
check_cxx_compiler_flag(-march=native CASCADE_RL_HAS_MARCH_NATIVE)
check_cxx_compiler_flag(-march=haswell CASCADE_RL_HAS_MARCH_HASWELL)
check_cxx_compiler_flag(-march=x86-64-v4 CASCADE_RL_HAS_MARCH_X86_64_V4)

set(_ef_variants baseline)
set(_ef_flags_baseline -O2)
if(CASCADE_RL_HAS_MARCH_NATIVE)
  list(APPEND _ef_variants native)
  set(_ef_flags_native -O3 -march=native -ffp-contract=fast)
endif()
if(CASCADE_RL_HAS_MARCH_HASWELL)
  list(APPEND _ef_variants haswell)
  set(_ef_flags_haswell -O3 -march=haswell -ffp-contract=fast)
endif()
if(CASCADE_RL_HAS_MARCH_X86_64_V4)
  list(APPEND _ef_variants avx512)
  set(_ef_flags_avx512 -O3 -march=x86-64-v4 -ffp-contract=fast)
endif()

list(APPEND _ef_variants device_path)
set(_ef_flags_device_path -O3 -ffp-contract=fast -DFINGERPRINT_DEVICE_PATH)
if(CASCADE_RL_HAS_MARCH_NATIVE)
  list(APPEND _ef_flags_device_path -march=native)
endif()

set(_ef_definitions "")
foreach(variant IN LISTS _ef_variants)
  set(target elementary_functions_fingerprint_${variant})
  add_executable(${target} "${_ef_dir}/elementary_functions_fingerprint.cpp")
  target_link_libraries(${target} PRIVATE cascade_rl::cascade_rl)
  # After CMAKE_CXX_FLAGS_<CONFIG> on the command line, so these -O levels win.
  target_compile_options(${target} PRIVATE ${_ef_flags_${variant}})
  string(TOUPPER "${variant}" upper)
  list(APPEND _ef_definitions "FINGERPRINT_${upper}=\"$<TARGET_FILE:${target}>\"")
endforeach()

add_executable(core_bitwise_elementary_functions "${_ef_dir}/../support/bitwise_fingerprint_runner.cpp")
target_link_libraries(core_bitwise_elementary_functions PRIVATE GTest::gtest_main)
# 12 functions or ranges, each a hash line and 48 named inputs (fewer for float), and the
# control line.
target_compile_definitions(core_bitwise_elementary_functions PRIVATE ${_ef_definitions} FINGERPRINT_MIN_LINES=500)
foreach(variant IN LISTS _ef_variants)
  add_dependencies(core_bitwise_elementary_functions elementary_functions_fingerprint_${variant})
endforeach()
gtest_discover_tests(core_bitwise_elementary_functions
  TEST_PREFIX "core_bitwise_elementary_functions."
  DISCOVERY_MODE PRE_TEST
  PROPERTIES LABELS bitwise TIMEOUT 300)

# The same functions in device code (nvcc, the CUDA target's architectures): compiling
# it checks that the header builds for the device; on a GPU it compares device and host
# bits. One ctest test for the binary (labels cuda, gpu, bitwise), skipped without a device.
if(TARGET cascade_rl::cuda)
  add_executable(cuda_elementary_functions "${_ef_dir}/../cuda/elementary_functions_device.cu")
  target_link_libraries(cuda_elementary_functions PRIVATE cascade_rl::cuda GTest::gtest_main)
  target_compile_options(cuda_elementary_functions PRIVATE ${CASCADE_RL_CUDA_WARNING_FLAGS})
  add_test(NAME cuda_elementary_functions COMMAND cuda_elementary_functions)
  set_tests_properties(cuda_elementary_functions PROPERTIES LABELS "cuda;gpu;bitwise" TIMEOUT 300
    SKIP_REGULAR_EXPRESSION "SKIPPED \\][^\n]*[1-9][0-9]* tests?, listed below")
endif()

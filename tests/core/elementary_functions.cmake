# The bitwise test of cascade_rl::math (include/cascade_rl/core/elementary_functions.hpp);
# included from tests/CMakeLists.txt. elementary_functions_fingerprint.cpp is built with
# the flag sets of tests/support/bitwise_fingerprint.cmake, and one more:
#   device_path  -O3 -ffp-contract=fast (and -march=native where taken) with
#                FINGERPRINT_DEVICE_PATH: the header's __CUDA_ARCH__ branch on the host,
#                the CUDA intrinsics modelled in the fingerprint source
# core_bitwise_elementary_functions compares their outputs bit for bit.

set(_ef_dir "${CMAKE_CURRENT_LIST_DIR}")
include("${_ef_dir}/../support/bitwise_fingerprint.cmake")
set(_ef_flags_device_path -O3 -ffp-contract=fast -DFINGERPRINT_DEVICE_PATH)
if(CASCADE_RL_HAS_MARCH_NATIVE)
  list(APPEND _ef_flags_device_path -march=native)
endif()
# 12 functions or ranges, each a hash line and 48 named inputs (fewer for float), and the
# control line.
cascade_rl_add_flags_fingerprint(core_bitwise_elementary_functions
  SOURCE "${_ef_dir}/elementary_functions_fingerprint.cpp"
  MIN_LINES 500
  EXTRA_VARIANT device_path EXTRA_FLAGS ${_ef_flags_device_path})

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

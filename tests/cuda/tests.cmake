# Registers the cuda tests; included from tests/CMakeLists.txt. cmake/cuda.cmake has
# defined the targets used here (CASCADE_RL_CCCL_INCLUDE_DIR, cascade_rl::cuda).
#
#   cuda_portable_cpp, cuda_portable_omp  the Thrust path on the host systems, built by
#                                         the C++ compiler: run everywhere.
#   cuda_emulated                         the same kernels and tests on a CPU emulator
#                                         of the CUDA runtime (tests/cuda/emulator).
#   cuda_executors                        the CUB kernels against the host executors;
#                                         ctest label gpu, skips without a device.

set(_cuda_tests_dir "${CMAKE_CURRENT_LIST_DIR}")

# The kernel side includes options and terms only (a read of its includes, no compiler).
add_test(NAME cuda_kernel_includes
         COMMAND "${CMAKE_COMMAND}" "-DROOT=${PROJECT_SOURCE_DIR}" -P "${_cuda_tests_dir}/kernel_includes.cmake")
set_tests_properties(cuda_kernel_includes PROPERTIES LABELS cuda)

# The portable tests: each GoogleTest case a ctest test labelled cuda; more test
# properties may follow the target.
function(_cascade_rl_cuda_test target)
  target_include_directories(${target} PRIVATE "${_cuda_tests_dir}/..")
  target_link_libraries(${target} PRIVATE cascade_rl::cascade_rl GTest::gtest_main)
  gtest_discover_tests(${target}
    TEST_PREFIX "${target}."
    DISCOVERY_MODE PRE_TEST
    PROPERTIES LABELS cuda ${ARGN})
endfunction()

if(CASCADE_RL_CCCL_INCLUDE_DIR)
  # Each operation of the portable path compiles alone (portable_headers_alone.cmake;
  # a syntax check, the same in every build: the sanitize build skips it).
  if(NOT CMAKE_CXX_FLAGS MATCHES "-fsanitize=")
    list(GET CUDAToolkit_INCLUDE_DIRS 0 _cuda_include)
    add_test(NAME cuda_portable_headers_alone
             COMMAND "${CMAKE_COMMAND}" "-DROOT=${PROJECT_SOURCE_DIR}"
                     "-DCXX=${CMAKE_CXX_COMPILER}" "-DCCCL=${CASCADE_RL_CCCL_INCLUDE_DIR}"
                     "-DCUDA_INCLUDE=${_cuda_include}"
                     "-DWORK=${CMAKE_CURRENT_BINARY_DIR}/portable_headers_alone"
                     -P "${_cuda_tests_dir}/portable_headers_alone.cmake")
    set_tests_properties(cuda_portable_headers_alone PROPERTIES LABELS cuda TIMEOUT 600)
  endif()
  foreach(system IN ITEMS CPP OMP)
    if(system STREQUAL "OMP" AND NOT OpenMP_CXX_FOUND)
      continue()
    endif()
    string(TOLOWER "${system}" suffix)
    set(target cuda_portable_${suffix})
    add_executable(${target} "${_cuda_tests_dir}/test_portable.cpp")
    target_compile_definitions(${target} PRIVATE
      THRUST_DEVICE_SYSTEM=THRUST_DEVICE_SYSTEM_${system})
    target_include_directories(${target} SYSTEM PRIVATE
      "${CASCADE_RL_CCCL_INCLUDE_DIR}" ${CUDAToolkit_INCLUDE_DIRS})
    target_include_directories(${target} PRIVATE "${PROJECT_SOURCE_DIR}/kernels")
    if(system STREQUAL "OMP")
      target_link_libraries(${target} PRIVATE OpenMP::OpenMP_CXX)
    endif()
    # UBSan builds (the sanitize preset): CCCL's thrust/detail/reference.h, line 330 in
    # CCCL 3.0.1 (thrust::reference::convert_to_value_type; line 346, assign_from, for a
    # write), dispatches on the system by dereferencing a null `System*` it made on
    # purpose ("Avoid default-constructing a system; instead, just use a null pointer for
    # dispatch", operator value_type(), line 185): a reference bound to null, which
    # -fsanitize=null reports. The OMP system reaches it through thrust::copy_if (generic
    # copy_if -> exclusive_scan over a temporary_array -> reading an element through
    # thrust::reference), both systems through thrust::stable_sort_by_key (the sequential
    # radix sort scatters into a temporary_array through thrust::reference: Clip-Cov's
    # seeded selection). Not our code, and GCC has no per-header ignore list: only these
    # two targets drop the null check; ASan and every other UBSan check stay on.
    if(CMAKE_CXX_FLAGS MATCHES "-fsanitize=[^ ]*(undefined|null)")
      target_compile_options(${target} PRIVATE -fno-sanitize=null)
    endif()
    cascade_rl_compute_bound(${target})  # Thrust over 100k-token batches
    _cascade_rl_cuda_test(${target})
  endforeach()
endif()

# The GPU tests on the CPU emulator (tests/cuda/emulator), built by the C++ compiler:
# the kernels themselves run here, each GoogleTest case a ctest test labelled cuda.
# In the sanitize preset AddressSanitizer checks the kernels' memory accesses as it does
# the host's (compute-sanitizer's memcheck, roughly). The fibers' switch is written for
# x86-64.
function(_cascade_rl_emulated_target target)
  add_executable(${target}
    "${_cuda_tests_dir}/test_executors_emulated.cpp"
    "${_cuda_tests_dir}/test_emulator.cpp"
    "${_cuda_tests_dir}/emulator/runtime.cpp"
    "${_cuda_tests_dir}/emulator/context_switch.cpp")
  # The emulator's cuda_runtime.h and cub/ shims come before the toolkit's headers.
  target_include_directories(${target} BEFORE PRIVATE "${_cuda_tests_dir}/emulator")
  target_include_directories(${target} SYSTEM PRIVATE
    "${CASCADE_RL_CCCL_INCLUDE_DIR}" ${CUDAToolkit_INCLUDE_DIRS})
  target_include_directories(${target} PRIVATE "${PROJECT_SOURCE_DIR}/kernels")
  target_compile_definitions(${target} PRIVATE THRUST_DEVICE_SYSTEM=THRUST_DEVICE_SYSTEM_CPP)
  target_compile_options(${target} PRIVATE -Wno-unknown-pragmas)  # nvcc's #pragma unroll
endfunction()

if(CASCADE_RL_CCCL_INCLUDE_DIR AND CUDAToolkit_FOUND AND CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$")
  _cascade_rl_emulated_target(cuda_emulated)
  cascade_rl_compute_bound(cuda_emulated)  # every GPU thread of the kernels, one by one
  # Again with the block's threads resumed in reverse and in shuffled order: a result that
  # changes with the order is a race between threads (see emulator.hpp).
  set(orders reverse shuffle)
  if(CMAKE_CXX_FLAGS MATCHES "-fsanitize=")
    # Under ASan the suite runs once (the other orders are the test workflow's), without
    # the fake stacks of detect_stack_use_after_return: with a fiber switch at every
    # shuffle they made it about ten times slower (four minutes for one test). The later
    # of two ASAN_OPTIONS entries wins.
    set(orders)
    _cascade_rl_cuda_test(cuda_emulated
      ENVIRONMENT_MODIFICATION "ASAN_OPTIONS=string_append::detect_stack_use_after_return=0")
  else()
    _cascade_rl_cuda_test(cuda_emulated)
  endif()
  foreach(order IN LISTS orders)
    gtest_discover_tests(cuda_emulated
      TEST_PREFIX "cuda_emulated_${order}."
      TEST_LIST "cuda_emulated_${order}_TESTS"
      DISCOVERY_MODE PRE_TEST
      PROPERTIES LABELS cuda ENVIRONMENT "CASCADE_RL_EMULATOR_ORDER=${order}")
  endforeach()
  # Once more with the flags under which a compiler fuses a product into the sum that
  # follows it (-O3 -march=native -ffp-contract=fast, as nvcc fuses by default): the
  # kernels and the host algorithms still agree bit for bit, because every product that
  # joins a sum is rounded alone on both sides. Run as bitwise.cuda_emulated_native
  # (tests/CMakeLists.txt); not in sanitizer builds.
  include(CheckCXXCompilerFlag)
  check_cxx_compiler_flag(-march=native CASCADE_RL_HAS_MARCH_NATIVE)
  if(CASCADE_RL_HAS_MARCH_NATIVE AND NOT CMAKE_CXX_FLAGS MATCHES "-fsanitize=")
    _cascade_rl_emulated_target(cuda_emulated_native)
    target_compile_options(cuda_emulated_native PRIVATE -O3 -march=native -ffp-contract=fast)
    target_include_directories(cuda_emulated_native PRIVATE "${_cuda_tests_dir}/..")
    target_link_libraries(cuda_emulated_native PRIVATE cascade_rl::cascade_rl GTest::gtest_main)
  endif()
endif()

# The GPU tests: one ctest test for the whole binary, so that it can carry both labels
# (cuda;gpu); without a device every case skips and ctest reports the test as skipped.
if(TARGET cascade_rl::cuda)
  add_executable(cuda_executors "${_cuda_tests_dir}/test_executors.cu")
  target_include_directories(cuda_executors PRIVATE "${_cuda_tests_dir}/..")
  target_link_libraries(cuda_executors PRIVATE cascade_rl::cuda GTest::gtest_main)
  target_compile_options(cuda_executors PRIVATE ${CASCADE_RL_CUDA_WARNING_FLAGS})
  add_test(NAME cuda_executors COMMAND cuda_executors)
  set_tests_properties(cuda_executors PROPERTIES LABELS "cuda;gpu" TIMEOUT 300
    SKIP_REGULAR_EXPRESSION "SKIPPED \\][^\n]*[1-9][0-9]* tests?, listed below")
  # The device's bits against the host's, every algorithm's *Match* test: losses,
  # metrics, per-token values and gradients; group advantages and statistics,
  # leave-one-out, token advantages, discounted returns, whitening, every estimator, the
  # selections (benchmarks/gpu_check.sh runs it as its own step). Log-probs alone are
  # compared within a tolerance.
  add_test(NAME bitwise.cuda_executors
    COMMAND cuda_executors "--gtest_filter=Gpu.*Match*")
  set_tests_properties(bitwise.cuda_executors PROPERTIES LABELS "cuda;gpu;bitwise" TIMEOUT 300
    SKIP_REGULAR_EXPRESSION "SKIPPED \\][^\n]*[1-9][0-9]* tests?, listed below")
endif()

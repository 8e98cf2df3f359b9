# cascade_rl::cuda: the CUDA executors (exec::cuda) of kernels/cascade_rl/cuda, CUB and
# Thrust; included from the top-level CMakeLists.txt before the tests.
#
#   CASCADE_RL_WITH_CUDA      ON by default when check_language(CUDA) finds nvcc: enables
#                             CUDA, defines cascade_rl::cuda and builds the .cu tests and
#                             GPU benchmarks (for CMAKE_CUDA_ARCHITECTURES, "80;90" unless
#                             set; CUDA warnings are errors).
#   CASCADE_RL_CCCL_INCLUDE_DIR  where thrust/ lives; with it the portable Thrust path is
#                             tested on the host (CPP and OMP systems) even without nvcc.

include(CheckLanguage)
check_language(CUDA)
set(_cascade_rl_cuda_default OFF)
if(CMAKE_CUDA_COMPILER)
  set(_cascade_rl_cuda_default ON)
endif()
option(CASCADE_RL_WITH_CUDA "Build the CUDA executors (cascade_rl::cuda) and their tests"
       ${_cascade_rl_cuda_default})

find_package(CUDAToolkit QUIET)
if(CUDAToolkit_FOUND)
  # CUDA 13 keeps CCCL under include/cccl (nvcc adds it itself; a host compiler needs it).
  find_path(CASCADE_RL_CCCL_INCLUDE_DIR thrust/version.h
    HINTS ${CUDAToolkit_INCLUDE_DIRS}
    PATH_SUFFIXES cccl
    NO_DEFAULT_PATH)
endif()

if(NOT CASCADE_RL_WITH_CUDA)
  return()
endif()
if(NOT CUDAToolkit_FOUND)
  message(FATAL_ERROR "cascade_rl: CASCADE_RL_WITH_CUDA is ON but the CUDA toolkit was not found")
endif()

if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_CUDA_ARCHITECTURES "80;90")
endif()
enable_language(CUDA)

add_library(cascade_rl_cuda INTERFACE)
add_library(cascade_rl::cuda ALIAS cascade_rl_cuda)
set_target_properties(cascade_rl_cuda PROPERTIES EXPORT_NAME cuda)
target_include_directories(cascade_rl_cuda INTERFACE
  $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/kernels>
  $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
target_link_libraries(cascade_rl_cuda INTERFACE cascade_rl::cascade_rl CUDA::cudart)
# CMake 3.25 does not know nvcc 13's dialects (cuda_std_20 fails to configure): the
# flag is passed directly to CUDA sources.
target_compile_options(cascade_rl_cuda INTERFACE $<$<COMPILE_LANGUAGE:CUDA>:-std=c++20>)

install(DIRECTORY kernels/cascade_rl/cuda
  DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}/cascade_rl"
  FILES_MATCHING PATTERN "*.hpp" PATTERN "*.cuh")
install(TARGETS cascade_rl_cuda EXPORT cascade_rl-cuda-targets)
install(EXPORT cascade_rl-cuda-targets
  NAMESPACE cascade_rl::
  DESTINATION "${CASCADE_RL_CMAKE_DIR}")

# Warnings as errors for this project's CUDA sources (host side through -Xcompiler).
set(CASCADE_RL_CUDA_WARNING_FLAGS
  $<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings -Xcompiler=-Wall,-Wextra,-Werror>)

if(CASCADE_RL_BUILD_BENCHMARKS)
  add_subdirectory("${PROJECT_SOURCE_DIR}/benchmarks/gpu" "${PROJECT_BINARY_DIR}/benchmarks/gpu")
endif()

# Communicators (include/cascade_rl/comm/): the local communicator, and the global
# reductions over any communicator (include/cascade_rl/distributed/), need only
# cascade_rl::cascade_rl; these targets add the transports.
#   cascade_rl::mpi   MPI (CPUs), when find_package(MPI COMPONENTS CXX) finds it
#   cascade_rl::nccl  NCCL (GPUs), when nccl.h, libnccl and the CUDA toolkit are found;
#                     compiled by the host compiler against the CUDA runtime headers, so
#                     it builds on machines without a GPU
# Each is an INTERFACE target installed with its own export set; the package config
# loads them as components.

find_package(MPI COMPONENTS CXX QUIET)
option(CASCADE_RL_WITH_MPI "Provide cascade_rl::mpi (MPI communicator)" ${MPI_CXX_FOUND})

if(CASCADE_RL_WITH_MPI)
  if(NOT MPI_CXX_FOUND)
    message(FATAL_ERROR "cascade_rl: CASCADE_RL_WITH_MPI is ON but MPI (CXX) was not found; "
                        "install libopenmpi-dev openmpi-bin or set CASCADE_RL_WITH_MPI=OFF")
  endif()
  add_library(cascade_rl_mpi INTERFACE)
  add_library(cascade_rl::mpi ALIAS cascade_rl_mpi)
  set_target_properties(cascade_rl_mpi PROPERTIES EXPORT_NAME mpi)
  target_link_libraries(cascade_rl_mpi INTERFACE cascade_rl MPI::MPI_CXX)
  install(TARGETS cascade_rl_mpi EXPORT cascade_rl-mpi-targets)
  install(EXPORT cascade_rl-mpi-targets
    NAMESPACE cascade_rl::
    DESTINATION "${CASCADE_RL_CMAKE_DIR}")
  message(STATUS "cascade_rl: cascade_rl::mpi (MPI ${MPI_CXX_VERSION})")
else()
  message(STATUS "cascade_rl: MPI not found or disabled; no cascade_rl::mpi")
endif()

find_package(CUDAToolkit QUIET)
set(_cascade_rl_nccl_found OFF)
if(CUDAToolkit_FOUND)
  find_path(CASCADE_RL_NCCL_INCLUDE_DIR nccl.h
    HINTS ENV NCCL_ROOT ENV NCCL_HOME ${CUDAToolkit_INCLUDE_DIRS}
    PATH_SUFFIXES include)
  find_library(CASCADE_RL_NCCL_LIBRARY nccl
    HINTS ENV NCCL_ROOT ENV NCCL_HOME ${CUDAToolkit_LIBRARY_DIR}
    PATH_SUFFIXES lib lib64)
  if(CASCADE_RL_NCCL_INCLUDE_DIR AND CASCADE_RL_NCCL_LIBRARY)
    set(_cascade_rl_nccl_found ON)
  endif()
endif()
option(CASCADE_RL_WITH_NCCL "Provide cascade_rl::nccl (NCCL communicator)" ${_cascade_rl_nccl_found})

if(CASCADE_RL_WITH_NCCL)
  if(NOT _cascade_rl_nccl_found)
    message(FATAL_ERROR "cascade_rl: CASCADE_RL_WITH_NCCL is ON but NCCL or the CUDA toolkit "
                        "was not found (set NCCL_ROOT, or CASCADE_RL_WITH_NCCL=OFF)")
  endif()
  add_library(cascade_rl_nccl INTERFACE)
  add_library(cascade_rl::nccl ALIAS cascade_rl_nccl)
  set_target_properties(cascade_rl_nccl PROPERTIES EXPORT_NAME nccl)
  target_include_directories(cascade_rl_nccl INTERFACE "${CASCADE_RL_NCCL_INCLUDE_DIR}")
  target_link_libraries(cascade_rl_nccl INTERFACE cascade_rl "${CASCADE_RL_NCCL_LIBRARY}"
                        CUDA::cudart)
  if(TARGET cascade_rl_mpi)
    target_link_libraries(cascade_rl_nccl INTERFACE cascade_rl_mpi)  # bootstrap the unique id
  endif()
  install(TARGETS cascade_rl_nccl EXPORT cascade_rl-nccl-targets)
  install(EXPORT cascade_rl-nccl-targets
    NAMESPACE cascade_rl::
    DESTINATION "${CASCADE_RL_CMAKE_DIR}")
  message(STATUS "cascade_rl: cascade_rl::nccl with ${CASCADE_RL_NCCL_LIBRARY}")
else()
  message(STATUS "cascade_rl: NCCL or the CUDA toolkit not found or disabled; no cascade_rl::nccl")
endif()

if(CASCADE_RL_BUILD_BENCHMARKS AND TARGET cascade_rl_nccl)
  add_subdirectory("${PROJECT_SOURCE_DIR}/benchmarks/comm" "${PROJECT_BINARY_DIR}/benchmarks/comm")
endif()

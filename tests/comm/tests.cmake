# The comm tests.
#   test_*.cpp      single-process (local communicator, global reductions over it), one
#                   gtest executable each (cascade_rl_add_test_area), label comm
#   mpi_*.cpp       multi-process gtest programs run under mpiexec with 1, 2 and 4
#                   processes, labels comm;mpi
#   mpi_cascade.cpp the cascade runner data-parallel: 1 and 2 processes each compare
#                   with a single-process run in rank 0 (bit for bit); comm;mpi;cascade
#   mpi_faults.cpp  drives mpi_fault_worker.cpp under mpiexec: a rank that dies, throws
#                   or stalls ends the job with a clear error within a bound; comm;mpi
#   nccl_checks.cpp the NCCL/CUDA check macros, no GPU needed; comm;nccl
#   nccl_*.cpp      the others need a GPU: skip (GTEST_SKIP, shown as skipped) without
#                   one; comm;gpu (mpi_nccl.cpp: comm;mpi;gpu)
# Processes run exec::seq and OMP_NUM_THREADS=1: 4 ranks share 2 cores in CI.

set(_comm_dir "${CMAKE_CURRENT_LIST_DIR}")
set(_comm_tests_root "${CMAKE_CURRENT_LIST_DIR}/..")
set(_comm_env "OMP_NUM_THREADS=1")

cascade_rl_add_test_area(comm)

if(TARGET cascade_rl::mpi)
  # Open MPI refuses root and more ranks than cores without these; other MPIs don't know
  # them, so they are only the default where mpiexec is Open MPI's.
  execute_process(COMMAND "${MPIEXEC_EXECUTABLE}" --version
                  OUTPUT_VARIABLE _comm_mpiexec_version ERROR_QUIET)
  set(_comm_mpiexec_default "")
  set(_comm_open_mpi 0)
  if(_comm_mpiexec_version MATCHES "Open MPI|OpenRTE")
    set(_comm_mpiexec_default "--allow-run-as-root;--oversubscribe")
    set(_comm_open_mpi 1)
  endif()
  set(CASCADE_RL_MPIEXEC_FLAGS "${_comm_mpiexec_default}" CACHE STRING
      "Flags for mpiexec in the MPI tests (Open MPI: --allow-run-as-root;--oversubscribe)")

  # cascade_rl_add_mpi_test(<target> PROCESSES n... [LABELS ...]): one ctest test per count.
  function(cascade_rl_add_mpi_test target)
    cmake_parse_arguments(PARSE_ARGV 1 arg "" "TIMEOUT" "PROCESSES;LABELS")
    foreach(np IN LISTS arg_PROCESSES)
      add_test(NAME ${target}.np${np}
        COMMAND "${MPIEXEC_EXECUTABLE}" ${MPIEXEC_NUMPROC_FLAG} ${np} ${CASCADE_RL_MPIEXEC_FLAGS}
                ${MPIEXEC_PREFLAGS} $<TARGET_FILE:${target}> ${MPIEXEC_POSTFLAGS})
      set_tests_properties(${target}.np${np} PROPERTIES
        LABELS "comm;mpi;${arg_LABELS}" TIMEOUT ${arg_TIMEOUT} PROCESSORS ${np}
        ENVIRONMENT "${_comm_env}"
        SKIP_REGULAR_EXPRESSION "SKIPPED \\][^\n]*[1-9][0-9]* tests?, listed below")
    endforeach()
  endfunction()

  add_executable(comm_mpi_collectives "${_comm_dir}/mpi_collectives.cpp")
  target_include_directories(comm_mpi_collectives PRIVATE "${_comm_tests_root}" "${_comm_dir}")
  target_link_libraries(comm_mpi_collectives PRIVATE cascade_rl::mpi GTest::gtest)
  cascade_rl_add_mpi_test(comm_mpi_collectives PROCESSES 1 2 4 TIMEOUT 120)

  if(TARGET cascade_rl::cascade)
    add_executable(comm_mpi_cascade "${_comm_dir}/mpi_cascade.cpp")
    target_include_directories(comm_mpi_cascade PRIVATE "${_comm_tests_root}" "${_comm_dir}")
    target_link_libraries(comm_mpi_cascade PRIVATE cascade_rl::cascade cascade_rl::mpi GTest::gtest)
    cascade_rl_add_mpi_test(comm_mpi_cascade PROCESSES 1 2 4 TIMEOUT 300 LABELS cascade)
  endif()

  # Fault tests: the driver (a plain gtest, no MPI) runs the worker under mpiexec with a
  # hard kill, so no outcome can hang CI; ctest's TIMEOUT is the last resort.
  add_executable(comm_mpi_fault_worker "${_comm_dir}/mpi_fault_worker.cpp")
  target_link_libraries(comm_mpi_fault_worker PRIVATE cascade_rl::mpi)
  add_executable(comm_mpi_faults "${_comm_dir}/mpi_faults.cpp")
  target_link_libraries(comm_mpi_faults PRIVATE GTest::gtest_main)
  list(JOIN CASCADE_RL_MPIEXEC_FLAGS " " _comm_mpiexec_flags)  # split on spaces by the driver
  target_compile_definitions(comm_mpi_faults PRIVATE
    CASCADE_RL_MPIEXEC="${MPIEXEC_EXECUTABLE}"
    CASCADE_RL_MPIEXEC_NUMPROC_FLAG="${MPIEXEC_NUMPROC_FLAG}"
    CASCADE_RL_MPIEXEC_FLAGS="${_comm_mpiexec_flags}"
    CASCADE_RL_MPIEXEC_IS_OPEN_MPI=${_comm_open_mpi}
    CASCADE_RL_FAULT_WORKER="$<TARGET_FILE:comm_mpi_fault_worker>")
  add_dependencies(comm_mpi_faults comm_mpi_fault_worker)
  # One ctest test per case, registered by name: gtest_discover_tests cannot carry a
  # list of labels (it flattens LABELS "comm;mpi").
  foreach(case IN ITEMS NoFaultCompletes KilledRankEndsTheJobWithinTheBound
                        KilledRankTimesOutEverySurvivorWhenTheLauncherWaits
                        ThrowingRankAbortsWithItsMessage ExceptionUnwindingThroughTheSessionAborts
                        StalledRankTimesOutTheOthers)
    add_test(NAME comm_mpi_faults.${case}
      COMMAND comm_mpi_faults --gtest_filter=MpiFaults.${case})
    set_tests_properties(comm_mpi_faults.${case} PROPERTIES
      LABELS "comm;mpi" TIMEOUT 120 PROCESSORS 2 ENVIRONMENT "${_comm_env}"
      SKIP_REGULAR_EXPRESSION "SKIPPED \\][^\n]*[1-9][0-9]* tests?, listed below")
  endforeach()
endif()

if(TARGET cascade_rl::nccl)
  # The check macros and error types need no GPU: they run everywhere NCCL is built.
  add_executable(comm_nccl_checks "${_comm_dir}/nccl_checks.cpp")
  target_link_libraries(comm_nccl_checks PRIVATE cascade_rl::nccl GTest::gtest_main)
  add_test(NAME comm_nccl_checks COMMAND comm_nccl_checks)
  set_tests_properties(comm_nccl_checks PROPERTIES LABELS "comm;nccl" TIMEOUT 60)

  add_executable(comm_nccl_communicator "${_comm_dir}/nccl_communicator.cpp")
  target_link_libraries(comm_nccl_communicator PRIVATE cascade_rl::nccl GTest::gtest_main)
  add_test(NAME comm_nccl_communicator COMMAND comm_nccl_communicator)
  set_tests_properties(comm_nccl_communicator PROPERTIES LABELS "comm;gpu" TIMEOUT 120
    SKIP_REGULAR_EXPRESSION "SKIPPED \\][^\n]*[1-9][0-9]* tests?, listed below")
  if(TARGET cascade_rl::mpi)
    # NCCL bootstrapped over MPI, one GPU per rank (ranks beyond the GPU count skip).
    add_executable(comm_mpi_nccl "${_comm_dir}/mpi_nccl.cpp")
    target_include_directories(comm_mpi_nccl PRIVATE "${_comm_tests_root}" "${_comm_dir}")
    target_link_libraries(comm_mpi_nccl PRIVATE cascade_rl::nccl cascade_rl::mpi GTest::gtest)
    cascade_rl_add_mpi_test(comm_mpi_nccl PROCESSES 1 2 TIMEOUT 120 LABELS gpu)
  endif()
  if(TARGET cascade_rl_nccl_all_reduce_bench)
    add_test(NAME comm_nccl_all_reduce_bench_smoke
      COMMAND cascade_rl_nccl_all_reduce_bench -b 8 -e 1M -f 8 -n 5 -w 2)
    set_tests_properties(comm_nccl_all_reduce_bench_smoke PROPERTIES
      LABELS "comm;gpu;benchmark" TIMEOUT 120 SKIP_RETURN_CODE 77)
  endif()
endif()

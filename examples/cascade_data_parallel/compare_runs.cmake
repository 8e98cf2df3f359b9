# cmake -DMPIEXEC=... -DNUMPROC_FLAG=-n -DFLAGS="..." -DPROGRAM=... -DWORK_DIR=... -P compare_runs.cmake
# Runs PROGRAM under mpiexec with 1 and 2 processes, each writing its forgetting matrix,
# and fails unless the two files are identical.
separate_arguments(flags UNIX_COMMAND "${FLAGS}")
file(REMOVE_RECURSE "${WORK_DIR}")
foreach(np 1 2)
  set(dir "${WORK_DIR}/np${np}")
  file(MAKE_DIRECTORY "${dir}")
  execute_process(
    COMMAND "${MPIEXEC}" ${NUMPROC_FLAG} ${np} ${flags} "${PROGRAM}" --check
            --matrix "${dir}/forgetting.json" --checkpoints "${dir}/checkpoints"
    WORKING_DIRECTORY "${dir}"
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message("---- ${np} process(es), exit ${rc}\n${out}${err}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "the run with ${np} process(es) failed (exit ${rc})")
  endif()
  file(READ "${dir}/forgetting.json" matrix_${np})
endforeach()
if(NOT matrix_1 STREQUAL matrix_2)
  message(FATAL_ERROR "the forgetting matrices differ:\n1 process:   ${matrix_1}\n2 processes: ${matrix_2}")
endif()
message("1 and 2 processes: the same forgetting matrix, bit for bit:\n${matrix_1}")

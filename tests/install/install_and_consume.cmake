# Script mode (cmake -P): install the built package into WORK_DIR/prefix, then build
# and run the consumer project against that prefix only.
foreach(var BUILD_DIR WORK_DIR CONSUMER_SOURCE GENERATOR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "install_and_consume: -D${var}=... is required")
  endif()
endforeach()

function(run_step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE result)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "install_and_consume: ${what} failed (${result})")
  endif()
endfunction()

file(REMOVE_RECURSE "${WORK_DIR}")
set(prefix "${WORK_DIR}/prefix")
run_step("install" "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${prefix}")
run_step("consumer configure" "${CMAKE_COMMAND}" -S "${CONSUMER_SOURCE}" -B "${WORK_DIR}/consumer"
         -G "${GENERATOR}" -DCMAKE_BUILD_TYPE=Release "-DCMAKE_PREFIX_PATH=${prefix}"
         -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)
run_step("consumer build" "${CMAKE_COMMAND}" --build "${WORK_DIR}/consumer")
run_step("consumer run" "${WORK_DIR}/consumer/consumer")
message(STATUS "install_and_consume: the consumer built and ran against ${prefix}")

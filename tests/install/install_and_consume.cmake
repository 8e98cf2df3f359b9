# Script mode (cmake -P): install the built package into WORK_DIR/prefix, then build
# and run the consumer project against that prefix only. COMPONENTS (optional, a
# comma-separated list) are requested from find_package and their consumers run too.
cmake_minimum_required(VERSION 3.25)  # policies for script mode (IN_LIST)
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
         -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF "-DCASCADE_RL_CONSUMER_COMPONENTS=${COMPONENTS}")
run_step("consumer build" "${CMAKE_COMMAND}" --build "${WORK_DIR}/consumer")
run_step("consumer run" "${WORK_DIR}/consumer/consumer")
string(REPLACE "," ";" components "${COMPONENTS}")
if("cuda" IN_LIST components)
  run_step("CUDA consumer run" "${WORK_DIR}/consumer/consumer_cuda")
endif()
if("openmp" IN_LIST components)
  run_step("OpenMP consumer run" "${WORK_DIR}/consumer/consumer_openmp")
endif()
message(STATUS "install_and_consume: the consumer built and ran against ${prefix}")

# A component that does not exist is refused by name.
file(WRITE "${WORK_DIR}/unknown_component/CMakeLists.txt"
  "cmake_minimum_required(VERSION 3.25)\nproject(unknown_component LANGUAGES CXX)\n"
  "find_package(cascade_rl CONFIG REQUIRED COMPONENTS no_such_part)\n")
execute_process(
  COMMAND "${CMAKE_COMMAND}" -S "${WORK_DIR}/unknown_component" -B "${WORK_DIR}/unknown_component/build"
          -G "${GENERATOR}" "-DCMAKE_PREFIX_PATH=${prefix}"
  RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE output)
if(result EQUAL 0 OR NOT output MATCHES "has no component 'no_such_part'")
  message(FATAL_ERROR "install_and_consume: an unknown component was not refused by name:\n${output}")
endif()

# Script mode (cmake -P): each header of the portable path (kernels/cascade_rl/cuda/
# portable/) compiles alone, so that a caller may include just the operation it runs.
# -DROOT=<source dir> -DCXX=<C++ compiler> -DCCCL=<CCCL include dir> -DCUDA_INCLUDE=<dir>
# -DWORK=<scratch dir>. A syntax check per header with the host compiler and Thrust's CPP
# system, warnings as errors.
file(GLOB headers "${ROOT}/kernels/cascade_rl/cuda/portable/*.hpp")
list(LENGTH headers count)
if(count LESS 15)
  message(FATAL_ERROR "portable_headers_alone: found only ${count} headers under ${ROOT}; wrong ROOT?")
endif()
file(MAKE_DIRECTORY "${WORK}")
set(failed "")
foreach(header IN LISTS headers)
  get_filename_component(name "${header}" NAME_WE)
  set(source "${WORK}/${name}.cpp")
  file(WRITE "${source}" "#include \"${header}\"\n")
  execute_process(
    COMMAND "${CXX}" -std=gnu++20 -fsyntax-only -Wall -Wextra -Wpedantic -Werror
            -DTHRUST_DEVICE_SYSTEM=THRUST_DEVICE_SYSTEM_CPP "-I${ROOT}/kernels"
            "-I${ROOT}/include" -isystem "${CCCL}" -isystem "${CUDA_INCLUDE}" "${source}"
    RESULT_VARIABLE result ERROR_VARIABLE errors)
  if(NOT result EQUAL 0)
    string(REGEX MATCH "[^\n]*error[^\n]*" first "${errors}")
    list(APPEND failed "${name}.hpp: ${first}")
  endif()
endforeach()
if(failed)
  list(JOIN failed "\n  " listed)
  message(FATAL_ERROR "portable_headers_alone: headers that do not compile alone:\n  ${listed}")
endif()
message(STATUS "portable_headers_alone: ${count} headers, each compiles alone")

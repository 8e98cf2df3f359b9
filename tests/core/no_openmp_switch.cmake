# Script mode (cmake -P, -DROOT=<source dir>): no installed header may change an inline
# body with _OPENMP (two definitions of one inline function in a program whose files
# differ in -fopenmp; see core/exec.hpp). Only core/exec_openmp.hpp may name it, to
# refuse a translation unit without OpenMP.
file(GLOB_RECURSE headers "${ROOT}/include/*.hpp" "${ROOT}/kernels/*.hpp" "${ROOT}/kernels/*.cuh")
set(offenders "")
foreach(header IN LISTS headers)
  if(header MATCHES "/core/exec_openmp\\.hpp$")
    continue()
  endif()
  file(STRINGS "${header}" lines REGEX "^[ \t]*#.*_OPENMP")
  if(lines)
    list(APPEND offenders "${header}: ${lines}")
  endif()
endforeach()
list(LENGTH headers count)
if(count LESS 50)
  message(FATAL_ERROR "no_openmp_switch: found only ${count} headers under ${ROOT}; wrong ROOT?")
endif()
if(offenders)
  list(JOIN offenders "\n  " text)
  message(FATAL_ERROR "no_openmp_switch: headers that depend on _OPENMP:\n  ${text}")
endif()
message(STATUS "no_openmp_switch: ${count} headers, none depends on _OPENMP")

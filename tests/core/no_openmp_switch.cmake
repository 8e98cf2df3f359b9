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
include("${CMAKE_CURRENT_LIST_DIR}/../support/header_scan_verdict.cmake")
header_scan_verdict(no_openmp_switch ${count} 50 offenders "headers that depend on _OPENMP"
                    "headers, none depends on _OPENMP")

# Script mode (cmake -P, -DROOT=<source dir>): the CUDA kernels (kernels/.../kernel/), their
# CUB-shaped launch layer (device/) and the shared device helpers (detail/) include
# options, terms and core only, never a header of include/cascade_rl/algorithms/. The
# throwing convenience layer (the files directly under kernels/cascade_rl/cuda/) may
# include the host algorithms, whose checks it reuses.
set(dir "${ROOT}/kernels/cascade_rl/cuda")
file(GLOB headers "${dir}/kernel/*" "${dir}/device/*" "${dir}/detail/*")
set(offenders "")
foreach(header IN LISTS headers)
  file(STRINGS "${header}" includes REGEX "^[ \t]*#[ \t]*include[ \t]*[\"<]cascade_rl/algorithms/")
  foreach(line IN LISTS includes)
    list(APPEND offenders "${header}: ${line}")
  endforeach()
endforeach()
list(LENGTH headers count)
include("${CMAKE_CURRENT_LIST_DIR}/../support/header_scan_verdict.cmake")
header_scan_verdict(kernel_includes ${count} 15 offenders
                    "kernel-side headers that include a host algorithm"
                    "kernel-side headers, options, terms and core only")

# Script mode (cmake -P, -DROOT=<source dir>): the library's layers include only
# downward. A header of include/cascade_rl/<layer>/ (and of kernels/cascade_rl/cuda/, the
# layer `cuda`) may include "cascade_rl/<other>/..." only when <other> is its own layer
# or in its list below; the umbrella headers directly under include/cascade_rl/ may
# include any layer. A read of the include lines, no compiler.
#
#   core          layouts, exec policies, errors, math: nothing of ours
#   comm          transport (the Communicator concept, communicator_ref, local, MPI,
#                 NCCL), beside core
#   options       every option struct (a loss's, an estimator's, the rollout
#                 correction's, the loss normaliser) and how they describe themselves
#                 (described.hpp): plain values, on core only, below every layer that
#                 computes with them
#   terms         per-token and per-group formulas
#   algorithms    each algorithm
#   presets       the peers' conventions, as algorithm options
#   cuda          the CUDA executors of the algorithms (cuda_kernel_includes narrows
#                 what their kernel side may take from algorithms/)
#   distributed   the algorithms' reductions across ranks, over comm
#   cascade       the engine
#   verify        sandboxed rewards, on the engine's concepts
cmake_minimum_required(VERSION 3.25)  # IN_LIST in script mode

set(allowed_core "")
set(allowed_options core)
set(allowed_comm core)
set(allowed_terms core options)
set(allowed_algorithms core options terms)
set(allowed_presets core options terms algorithms)
set(allowed_cuda core options terms algorithms)
set(allowed_distributed core comm options terms algorithms)
set(allowed_cascade core comm options terms algorithms presets distributed)
set(allowed_verify core comm options terms algorithms presets distributed cascade)

# Known upward arrows, "<layer> -> <included header>", each to be removed by moving the
# header down; no other header may join them. None today (the option structs were the
# last: they moved down from algorithms/ and terms/ to options/).
set(known_upward "")

set(include_root "${ROOT}/include/cascade_rl")
file(GLOB_RECURSE headers "${include_root}/*.hpp" "${include_root}/*.cuh"
     "${ROOT}/kernels/cascade_rl/cuda/*.hpp" "${ROOT}/kernels/cascade_rl/cuda/*.cuh")
set(offenders "")
set(checked 0)
foreach(header IN LISTS headers)
  file(RELATIVE_PATH relative "${ROOT}" "${header}")
  if(relative MATCHES "^kernels/cascade_rl/cuda/")
    set(layer cuda)
  elseif(relative MATCHES "^include/cascade_rl/([^/]+)/")
    set(layer "${CMAKE_MATCH_1}")
  else()
    continue()  # an umbrella header directly under include/cascade_rl/
  endif()
  if(NOT DEFINED allowed_${layer})
    list(APPEND offenders "${header}: layer '${layer}' has no rule (add allowed_${layer} to ${CMAKE_CURRENT_LIST_FILE})")
    continue()
  endif()
  math(EXPR checked "${checked} + 1")
  file(STRINGS "${header}" includes REGEX "^[ \t]*#[ \t]*include[ \t]*[\"<]cascade_rl/")
  foreach(line IN LISTS includes)
    string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*[\"<]([^\">]*)[\">].*" "\\1" target "${line}")
    if(NOT target MATCHES "^cascade_rl/([^/]+)/")
      continue()  # cascade_rl/<umbrella>.hpp: not a layer's header
    endif()
    set(target_layer "${CMAKE_MATCH_1}")
    if(target_layer STREQUAL layer OR target_layer IN_LIST allowed_${layer}
       OR "${layer} -> ${target}" IN_LIST known_upward)
      continue()
    endif()
    set(allowed ${layer} ${allowed_${layer}})
    list(TRANSFORM allowed APPEND "/")
    list(JOIN allowed ", " allowed)
    list(APPEND offenders "${header}: ${line}  (${layer}/ may include only ${allowed})")
  endforeach()
endforeach()
include("${CMAKE_CURRENT_LIST_DIR}/../support/header_scan_verdict.cmake")
header_scan_verdict(layer_includes ${checked} 100 offenders
                    "includes that point up or sideways" "headers, every include points down")

# The end of a script-mode header scan (cmake -P: layer_includes, cuda_kernel_includes,
# core_no_openmp_switch), one way for all: a scan that read fewer than <minimum> headers
# was pointed at the wrong ROOT and fails rather than pass on nothing; otherwise each
# offender, one a line, fails it.
#   header_scan_verdict(<name> <count> <minimum> <offenders variable> <offence> <verdict>)
# prints "<name>: <count> <verdict>" when it passes.
function(header_scan_verdict name count minimum offenders_variable offence verdict)
  if(count LESS minimum)
    message(FATAL_ERROR "${name}: found only ${count} headers under ${ROOT}; wrong ROOT?")
  endif()
  if(${offenders_variable})
    list(JOIN ${offenders_variable} "\n  " text)
    message(FATAL_ERROR "${name}: ${offence}:\n  ${text}")
  endif()
  message(STATUS "${name}: ${count} ${verdict}")
endfunction()

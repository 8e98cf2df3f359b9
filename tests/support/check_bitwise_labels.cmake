# The test bitwise_labels (tests/CMakeLists.txt): lists the tests labelled bitwise as
# ctest sees them (CTEST -N in BUILD_DIR) and requires, for each prefix in PREFIXES
# (';'-separated, joined by '|' on the command line), at least one case whose name starts
# with it; a case of an emulated run (cuda_emulated*) must be a device-versus-host one
# (Gpu.*Match*). The labels are set by scripts at ctest time (cascade_rl_label_bitwise),
# so this reads them where they take effect.
execute_process(COMMAND "${CTEST}" -N -L "^bitwise$"
                WORKING_DIRECTORY "${BUILD_DIR}"
                OUTPUT_VARIABLE listing RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "ctest -N -L ^bitwise$ in ${BUILD_DIR}: exit status ${status}")
endif()
string(REPLACE ";" "\\;" listing "${listing}")
string(REGEX REPLACE "\n" ";" lines "${listing}")
set(names "")
foreach(line IN LISTS lines)
  if(line MATCHES "Test +#[0-9]+: (.+)$")
    list(APPEND names "${CMAKE_MATCH_1}")
  endif()
endforeach()
list(LENGTH names count)
message(STATUS "${count} tests labelled bitwise")
string(REPLACE "|" ";" prefixes "${PREFIXES}")
foreach(prefix IN LISTS prefixes)
  set(found 0)
  foreach(name IN LISTS names)
    string(FIND "${name}" "${prefix}" at)
    if(at EQUAL 0)
      math(EXPR found "${found} + 1")
    endif()
  endforeach()
  if(found EQUAL 0)
    message(FATAL_ERROR "no test labelled bitwise starts with '${prefix}'")
  endif()
  message(STATUS "  ${prefix}: ${found}")
endforeach()
foreach(name IN LISTS names)
  if(name MATCHES "^cuda_emulated[a-z_]*[.]" AND NOT name MATCHES "^cuda_emulated[a-z_]*[.]Gpu[.].*Match")
    message(FATAL_ERROR "'${name}' is labelled bitwise but is not a device-versus-host case")
  endif()
endforeach()

# Misuse that must not compile (issue 17: an API that resists misuse). Each snippet in
# misuse/ holds the wrong call, and under -DCASCADE_RL_CORRECT_USE the right one:
#   api_misuse.<name>.wrong    compiling the wrong call fails, with the compiler's
#                              message matching the snippet's `// expect: <regex>` line
#                              (so it fails for the stated reason, not for a typo);
#   api_misuse.<name>.correct  the right call compiles (so the snippet itself is sound).
# The snippets are compiled by the build's own C++ compiler, syntax only.
file(GLOB _misuse_snippets CONFIGURE_DEPENDS "${CMAKE_CURRENT_LIST_DIR}/misuse/*.cpp")
foreach(snippet IN LISTS _misuse_snippets)
  get_filename_component(name "${snippet}" NAME_WE)
  file(STRINGS "${snippet}" expect_line REGEX "^// expect: ")
  if(NOT expect_line)
    message(FATAL_ERROR "${snippet}: no `// expect: <regex>` line")
  endif()
  string(REGEX REPLACE "^// expect: " "" expect "${expect_line}")
  set(compile "${CMAKE_CXX_COMPILER}" -std=c++20 -fsyntax-only
      "-I${PROJECT_SOURCE_DIR}/include" "${snippet}")
  add_test(NAME api_misuse.${name}.wrong COMMAND ${compile})
  set_tests_properties(api_misuse.${name}.wrong PROPERTIES LABELS api
                       PASS_REGULAR_EXPRESSION "${expect}" TIMEOUT 120)
  add_test(NAME api_misuse.${name}.correct COMMAND ${compile} -DCASCADE_RL_CORRECT_USE)
  set_tests_properties(api_misuse.${name}.correct PROPERTIES LABELS api TIMEOUT 120)
endforeach()

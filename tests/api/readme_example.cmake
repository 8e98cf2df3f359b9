# README's first example is a whole program: extract the C++ block after the
# `<!-- api_readme_example -->` marker, build it against the library and run it, checking
# the values it prints (hand-computed: group {1, 0, 0} has mean 1/3 and unbiased std
# sqrt(1/3), so A = 2 / sqrt(3) on sequence 0; the loss is -sum_t A_t / 14).
file(READ "${PROJECT_SOURCE_DIR}/README.md" _readme)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${PROJECT_SOURCE_DIR}/README.md")
string(FIND "${_readme}" "<!-- api_readme_example -->\n```cpp\n" _start)
if(_start LESS 0)
  message(FATAL_ERROR "README.md: no `<!-- api_readme_example -->` marker before a ```cpp block")
endif()
string(SUBSTRING "${_readme}" ${_start} -1 _rest)
string(FIND "${_rest}" "```cpp\n" _code)
math(EXPR _code "${_code} + 7")
string(SUBSTRING "${_rest}" ${_code} -1 _rest)
string(FIND "${_rest}" "```" _end)
string(SUBSTRING "${_rest}" 0 ${_end} _example)
# Written beside and copied only when it changed, so that a reconfigure does not rebuild it.
file(WRITE "${CMAKE_CURRENT_BINARY_DIR}/api_readme_example.cpp.new" "${_example}")
file(COPY_FILE "${CMAKE_CURRENT_BINARY_DIR}/api_readme_example.cpp.new"
     "${CMAKE_CURRENT_BINARY_DIR}/api_readme_example.cpp" ONLY_IF_DIFFERENT)
add_executable(api_readme_example "${CMAKE_CURRENT_BINARY_DIR}/api_readme_example.cpp")
target_link_libraries(api_readme_example PRIVATE cascade_rl::cascade_rl)
add_test(NAME api_readme_example COMMAND api_readme_example)
set_tests_properties(api_readme_example PROPERTIES LABELS api TIMEOUT 60
  PASS_REGULAR_EXPRESSION "^loss 0\\.16495[67], dL/dlogp of token 0: -0\\.08247[89]\n$")

# Registers the reliability tests (issue 9); included from tests/CMakeLists.txt.
#   test_*.cpp           numerical edge cases and checkpoint corruption, label reliability
#   test_crash_resume    SIGKILLs the cascade demo at many points (some while it writes a
#                        checkpoint), resumes, and compares with an uninterrupted run
# With CASCADE_RL_BUILD_FUZZERS (the `fuzz` preset, clang) the libFuzzer harnesses of
# fuzz/ are added too, with a bounded run of each as a test labelled fuzz.
if(TARGET cascade_rl::cascade)
  cascade_rl_add_test_area(reliability LIBRARIES cascade_rl::cascade TIMEOUT 600)
  # examples/ is added after tests/: the demo's path is resolved at generate time, empty
  # (the test skips) when the demo is not built.
  # (test_crash_resume.cpp, in the area's executable reliability_tests).
  if(TARGET reliability_tests)
    target_compile_definitions(reliability_tests PRIVATE
      CASCADE_RL_DEMO_EXECUTABLE="$<$<TARGET_EXISTS:cascade_demo>:$<TARGET_FILE:cascade_demo>>")
  endif()
endif()

option(CASCADE_RL_BUILD_FUZZERS "Build the libFuzzer harnesses of fuzz/ (needs clang)" OFF)
if(CASCADE_RL_BUILD_FUZZERS)
  add_subdirectory("${PROJECT_SOURCE_DIR}/fuzz" "${PROJECT_BINARY_DIR}/fuzz")
endif()

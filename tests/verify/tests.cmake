# Registers the sandbox tests (issues 10 and 18); included from tests/CMakeLists.txt.
# Each case has a ctest TIMEOUT, and each test process also a watchdog
# (verify/support.hpp) that ends it after 60 s.
if(TARGET cascade_rl::verify)
  cascade_rl_add_test_area(verify UNITY LIBRARIES cascade_rl::verify TIMEOUT 120)
  # The same sandbox tests as a user that is not root, so that the sandbox takes its
  # unprivileged-user-namespace path (run_unprivileged.sh says how): once with a cgroup
  # directory delegated to that user, once without (the run-level memory and CPU caps
  # then skip, saying why). When ctest itself is not root the binaries run as they are.
  set(cascade_rl_unprivileged_uid 64123 CACHE STRING
      "uid that the unprivileged sandbox tests run as when ctest is root (no passwd entry needed)")
  # The cases of these files (their suites, as the area's discovery selects them) in the
  # area's executable verify_tests.
  function(_cascade_rl_verify_filter out)
    set(filters "")
    foreach(name IN LISTS ARGN)
      cascade_rl_test_file_filter(filter "${CMAKE_CURRENT_FUNCTION_LIST_DIR}/test_${name}.cpp")
      list(APPEND filters "${filter}")
    endforeach()
    list(JOIN filters ":" filters)
    set(${out} "${filters}" PARENT_SCOPE)
  endfunction()
  _cascade_rl_verify_filter(with_cgroups sandbox adversarial run_caps syscall_filter pool
                            reward_integrity shared_files workspace)
  _cascade_rl_verify_filter(no_cgroups sandbox run_caps)
  add_test(NAME verify_unprivileged
    COMMAND sh "${CMAKE_CURRENT_LIST_DIR}/run_unprivileged.sh" ${cascade_rl_unprivileged_uid} with-cgroups
            "${with_cgroups}" "$<TARGET_FILE:verify_tests>")
  add_test(NAME verify_unprivileged_no_cgroups
    COMMAND sh "${CMAKE_CURRENT_LIST_DIR}/run_unprivileged.sh" ${cascade_rl_unprivileged_uid} no-cgroups
            "${no_cgroups}" "$<TARGET_FILE:verify_tests>")
  set_tests_properties(verify_unprivileged verify_unprivileged_no_cgroups PROPERTIES
    LABELS verify TIMEOUT 300 SKIP_RETURN_CODE 77)
endif()

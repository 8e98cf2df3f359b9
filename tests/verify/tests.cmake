# Registers the sandbox tests (issues 10 and 18); included from tests/CMakeLists.txt.
# Each case has a ctest TIMEOUT, and each test process also a watchdog
# (verify/support.hpp) that ends it after 60 s.
if(TARGET cascade_rl::verify)
  cascade_rl_add_test_area(verify LIBRARIES cascade_rl::verify TIMEOUT 120)
  # The same sandbox tests as a user that is not root, so that the sandbox takes its
  # unprivileged-user-namespace path (run_unprivileged.sh says how): once with a cgroup
  # directory delegated to that user, once without (the run-level memory and CPU caps
  # then skip, saying why). When ctest itself is not root the binaries run as they are.
  set(cascade_rl_unprivileged_uid 64123 CACHE STRING
      "uid that the unprivileged sandbox tests run as when ctest is root (no passwd entry needed)")
  set(binaries verify_sandbox verify_adversarial verify_run_caps verify_syscall_filter verify_pool
               verify_reward_integrity)
  list(TRANSFORM binaries PREPEND "$<TARGET_FILE:" OUTPUT_VARIABLE with_cgroups)
  list(TRANSFORM with_cgroups APPEND ">")
  add_test(NAME verify_unprivileged
    COMMAND sh "${CMAKE_CURRENT_LIST_DIR}/run_unprivileged.sh" ${cascade_rl_unprivileged_uid} with-cgroups
            ${with_cgroups})
  add_test(NAME verify_unprivileged_no_cgroups
    COMMAND sh "${CMAKE_CURRENT_LIST_DIR}/run_unprivileged.sh" ${cascade_rl_unprivileged_uid} no-cgroups
            "$<TARGET_FILE:verify_sandbox>" "$<TARGET_FILE:verify_run_caps>")
  set_tests_properties(verify_unprivileged verify_unprivileged_no_cgroups PROPERTIES
    LABELS verify TIMEOUT 300 SKIP_RETURN_CODE 77)
endif()

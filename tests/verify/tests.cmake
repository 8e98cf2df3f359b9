# Registers the sandbox tests (issue 10); included from tests/CMakeLists.txt. Each case
# has a ctest TIMEOUT, and each test process also a watchdog (verify/support.hpp) that
# ends it after 60 s.
if(TARGET cascade_rl::verify)
  cascade_rl_add_test_area(verify LIBRARIES cascade_rl::verify TIMEOUT 120)
endif()

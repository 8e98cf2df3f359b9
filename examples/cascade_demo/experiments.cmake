# cascade_demo_experiments: the demo's compiled part (experiment.cpp: the Eigen policy,
# a seed's world and the run of every variant), a static library shared by the demo
# (CMakeLists.txt here) and its tests (tests/demo/tests.cmake), so that what the cascades
# instantiate (the runner, the stages, the Eigen policy's training) is compiled once per
# build, not once in each program, and the programs themselves are not arithmetic-bound.
# Included by both; the first defines it. Needs cascade_rl::cascade.
include_guard(GLOBAL)
find_package(Eigen3 3.3 REQUIRED NO_MODULE)

add_library(cascade_demo_experiments STATIC "${CMAKE_CURRENT_LIST_DIR}/experiment.cpp")
target_include_directories(cascade_demo_experiments PUBLIC "${CMAKE_CURRENT_LIST_DIR}")
target_link_libraries(cascade_demo_experiments PUBLIC cascade_rl::cascade Eigen3::Eigen)
# The demo's arithmetic (Eigen's products, SFT, every variant's training) runs here.
cascade_rl_compute_bound(cascade_demo_experiments)
# Code and SWE answers run by python3 in cascade_rl::verify's sandbox where the build has
# it (Linux), by the demo's bounded interpreter otherwise.
if(TARGET cascade_rl::verify)
  target_link_libraries(cascade_demo_experiments PUBLIC cascade_rl::verify)
  target_compile_definitions(cascade_demo_experiments PUBLIC CASCADE_DEMO_WITH_SANDBOX=1)
endif()

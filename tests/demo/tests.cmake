# Registers the demo tests (issue 4); included from tests/CMakeLists.txt. They test the
# cascade demo's parts (examples/cascade_demo): vocabulary, verifiers, interpreter,
# reward model, and the Eigen policy's gradient.
if(TARGET cascade_rl::cascade)
  find_package(Eigen3 3.3 REQUIRED NO_MODULE)
  cascade_rl_add_test_area(demo LIBRARIES cascade_rl::cascade Eigen3::Eigen)
  file(GLOB demo_test_sources CONFIGURE_DEPENDS "${CMAKE_CURRENT_LIST_DIR}/test_*.cpp")
  foreach(source IN LISTS demo_test_sources)
    get_filename_component(stem "${source}" NAME_WE)
    string(REGEX REPLACE "^test_" "demo_" target "${stem}")
    target_include_directories(${target} PRIVATE "${PROJECT_SOURCE_DIR}/examples/cascade_demo")
  endforeach()
endif()

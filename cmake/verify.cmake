# cascade_rl::verify, sandboxed execution rewards (issue 10); included from the top-level
# CMakeLists.txt. Header-only like the rest; Linux only (namespaces, cgroups, clone).
# The rewards plug into the engine, so the target needs cascade_rl::cascade when it
# exists; without the engine it still provides the sandbox and the pool.
if(NOT (UNIX AND NOT APPLE))
  message(STATUS "cascade_rl: cascade_rl::verify needs Linux; not provided on ${CMAKE_SYSTEM_NAME}")
  return()
endif()
find_package(Threads REQUIRED)

add_library(cascade_rl_verify INTERFACE)
add_library(cascade_rl::verify ALIAS cascade_rl_verify)
set_target_properties(cascade_rl_verify PROPERTIES EXPORT_NAME verify)
if(TARGET cascade_rl_cascade)
  target_link_libraries(cascade_rl_verify INTERFACE cascade_rl_cascade Threads::Threads)
else()
  target_link_libraries(cascade_rl_verify INTERFACE cascade_rl Threads::Threads)
  message(STATUS "cascade_rl: cascade_rl::verify without the engine: sandbox and pool only, no rewards")
endif()

install(TARGETS cascade_rl_verify EXPORT cascade_rl-verify-targets)
install(EXPORT cascade_rl-verify-targets
  NAMESPACE cascade_rl::
  DESTINATION "${CASCADE_RL_CMAKE_DIR}")

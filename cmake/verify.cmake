# cascade_rl::verify, sandboxed execution rewards (issues 10 and 18); included from the
# top-level CMakeLists.txt. Header-only like the rest; Linux only (namespaces, cgroups,
# clone). The rewards plug into the engine, so the target needs cascade_rl::cascade when
# it exists; without the engine it still provides the sandbox and the pool. The
# sandbox's syscall filter is built with libseccomp (>= 2.5) when it is found: the
# target then links it and defines CASCADE_RL_VERIFY_SECCOMP=1, and the installed
# package finds it again for the verify component (cmake/cascade_rl_libseccomp.cmake).
if(NOT (UNIX AND NOT APPLE))
  message(STATUS "cascade_rl: cascade_rl::verify needs Linux; not provided on ${CMAKE_SYSTEM_NAME}")
  return()
endif()
find_package(Threads REQUIRED)
option(CASCADE_RL_WITH_SECCOMP "Build cascade_rl::verify's syscall filter with libseccomp" ON)

add_library(cascade_rl_verify INTERFACE)
add_library(cascade_rl::verify ALIAS cascade_rl_verify)
set_target_properties(cascade_rl_verify PROPERTIES EXPORT_NAME verify)
if(TARGET cascade_rl_cascade)
  target_link_libraries(cascade_rl_verify INTERFACE cascade_rl_cascade Threads::Threads)
else()
  target_link_libraries(cascade_rl_verify INTERFACE cascade_rl Threads::Threads)
  message(STATUS "cascade_rl: cascade_rl::verify without the engine: sandbox and pool only, no rewards")
endif()

set(CASCADE_RL_VERIFY_WITH_SECCOMP OFF)
if(CASCADE_RL_WITH_SECCOMP)
  include("${CMAKE_CURRENT_LIST_DIR}/cascade_rl_libseccomp.cmake")
  if(cascade_rl_libseccomp_FOUND)
    target_link_libraries(cascade_rl_verify INTERFACE cascade_rl::libseccomp)
    target_compile_definitions(cascade_rl_verify INTERFACE CASCADE_RL_VERIFY_SECCOMP=1)
    set(CASCADE_RL_VERIFY_WITH_SECCOMP ON)
    # Its presence in the installed package says that the verify component needs it.
    install(FILES "${CMAKE_CURRENT_LIST_DIR}/cascade_rl_libseccomp.cmake" DESTINATION "${CASCADE_RL_CMAKE_DIR}")
  else()
    message(WARNING "cascade_rl: libseccomp >= 2.5 not found (Debian: libseccomp-dev): cascade_rl::verify is "
                    "built without its syscall filter, and a sandbox refuses to run unless told to warn")
  endif()
endif()

install(TARGETS cascade_rl_verify EXPORT cascade_rl-verify-targets)
install(EXPORT cascade_rl-verify-targets
  NAMESPACE cascade_rl::
  DESTINATION "${CASCADE_RL_CMAKE_DIR}")

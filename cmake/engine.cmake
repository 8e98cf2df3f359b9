# cascade_rl::cascade: the cascade engine (stages, schedules, MOPD teachers, forgetting
# matrix, checkpoints, observers). Header-only like the core, but it needs a JSON library
# for checkpoints and metrics lines and threads for the reward worker pool, so it is a
# target of its own: the core (cascade_rl::cascade_rl) stays standard-library-only.
find_package(nlohmann_json 3.10 QUIET)
option(CASCADE_RL_WITH_ENGINE "Provide cascade_rl::cascade (needs nlohmann_json)" ${nlohmann_json_FOUND})
if(NOT CASCADE_RL_WITH_ENGINE)
  message(STATUS "cascade_rl: nlohmann_json not found or engine disabled; no cascade_rl::cascade")
  return()
endif()
if(NOT nlohmann_json_FOUND)
  message(FATAL_ERROR "cascade_rl: CASCADE_RL_WITH_ENGINE is ON but nlohmann_json (3.10 or newer) "
                      "was not found; install nlohmann-json3-dev or set CASCADE_RL_WITH_ENGINE=OFF")
endif()
find_package(Threads REQUIRED)

add_library(cascade_rl_cascade INTERFACE)
add_library(cascade_rl::cascade ALIAS cascade_rl_cascade)
set_target_properties(cascade_rl_cascade PROPERTIES EXPORT_NAME cascade)
target_link_libraries(cascade_rl_cascade INTERFACE
  cascade_rl::cascade_rl nlohmann_json::nlohmann_json Threads::Threads)

install(TARGETS cascade_rl_cascade EXPORT cascade_rl-cascade-targets)
install(EXPORT cascade_rl-cascade-targets
  NAMESPACE cascade_rl::
  DESTINATION "${CASCADE_RL_CMAKE_DIR}")

# The engine's step losses compiled once for this build's own programs (tests, examples,
# fuzzers, an add_subdirectory consumer's) instead of in each of their translation
# units: the update rule can hold any loss, so every unit that includes the engine
# instantiates and optimises all of them, a quarter to three fifths of its code
# (examples/custom_policy at -O3: 49 CPU s and 2.1 MB of object code, 27 s and 0.67 MB
# with the losses compiled once).
# Build tree only ($<BUILD_INTERFACE>): an installed engine stays header-only, and a
# user's build can do the same (include/cascade_rl/cascade/step_losses.hpp says how).
add_library(cascade_rl_step_losses STATIC "${PROJECT_SOURCE_DIR}/src/step_losses.cpp")
target_link_libraries(cascade_rl_step_losses PUBLIC cascade_rl::cascade_rl)
target_compile_definitions(cascade_rl_step_losses INTERFACE CASCADE_RL_COMPILED_STEP_LOSSES=1)
cascade_rl_compute_bound(cascade_rl_step_losses)
target_link_libraries(cascade_rl_cascade INTERFACE $<BUILD_INTERFACE:cascade_rl_step_losses>)

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

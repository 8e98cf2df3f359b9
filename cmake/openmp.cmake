# cascade_rl::openmp: the core plus OpenMP, for translation units that use exec::omp
# (core/exec_openmp.hpp). A target of its own because OpenMP must be chosen per
# translation unit by the user, not switched on for everyone who links the core: see
# core/exec.hpp for the ODR trap of an inline body that changes with -fopenmp.
option(CASCADE_RL_USE_OPENMP "Provide cascade_rl::openmp (exec::omp) when OpenMP is found" ON)
if(NOT CASCADE_RL_USE_OPENMP)
  return()
endif()
find_package(OpenMP COMPONENTS CXX)
if(NOT OpenMP_CXX_FOUND)
  message(STATUS "cascade_rl: OpenMP not found; no cascade_rl::openmp (exec::par still runs on std::thread)")
  return()
endif()

add_library(cascade_rl_openmp INTERFACE)
add_library(cascade_rl::openmp ALIAS cascade_rl_openmp)
set_target_properties(cascade_rl_openmp PROPERTIES EXPORT_NAME openmp)
target_link_libraries(cascade_rl_openmp INTERFACE cascade_rl::cascade_rl OpenMP::OpenMP_CXX)

install(TARGETS cascade_rl_openmp EXPORT cascade_rl-openmp-targets)
install(EXPORT cascade_rl-openmp-targets
  NAMESPACE cascade_rl::
  DESTINATION "${CASCADE_RL_CMAKE_DIR}")

# Registers the demo tests (issues 4 and 19); included from tests/CMakeLists.txt. They
# test the cascade demo's parts (examples/cascade_demo): vocabulary, domains and
# verifiers, the program verifier (python3 in the sandbox against the interpreter), the
# reward model, the measurements, the experiment's variants, the Eigen policy's
# gradient; and scripts/demo_figures.py on synthetic inputs.
if(TARGET cascade_rl::cascade)
  include("${PROJECT_SOURCE_DIR}/examples/cascade_demo/experiments.cmake")
  cascade_rl_add_test_area(demo UNITY LIBRARIES cascade_demo_experiments)

  # The figures script, where /usr/bin/python3 has matplotlib (scripts/install-deps.sh).
  find_program(CASCADE_RL_FIGURES_PYTHON python3 PATHS /usr/bin NO_DEFAULT_PATH)
  if(CASCADE_RL_FIGURES_PYTHON)
    execute_process(COMMAND "${CASCADE_RL_FIGURES_PYTHON}" -c "import matplotlib"
                    RESULT_VARIABLE demo_no_matplotlib OUTPUT_QUIET ERROR_QUIET)
    if(demo_no_matplotlib EQUAL 0)
      add_test(NAME demo_figures_selftest
               COMMAND "${CASCADE_RL_FIGURES_PYTHON}" "${PROJECT_SOURCE_DIR}/scripts/demo_figures.py"
                       --selftest "${CMAKE_CURRENT_BINARY_DIR}/demo_figures_selftest")
      set_tests_properties(demo_figures_selftest PROPERTIES LABELS "demo" TIMEOUT 120)
    endif()
  endif()
endif()

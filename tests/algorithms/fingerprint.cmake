# The flags test of the host algorithms: algorithms_fingerprint.cpp hashes every host
# algorithm's outputs, built with each flag set of tests/support/bitwise_fingerprint.cmake;
# algorithms_bitwise_flags compares them with the baseline's. Not in sanitizer builds
# (the variants would not be instrumented alike).
if(CMAKE_CXX_FLAGS MATCHES "-fsanitize=")
  return()
endif()
include("${CMAKE_CURRENT_LIST_DIR}/../support/bitwise_fingerprint.cmake")
# Both precisions: 5 modes x 4 losses (loss, approx_kl, counts, grad) + 4 KL estimators
# x 5 + importance (2) + 22 advantage outputs, per precision; 12 log-prob lines; the
# control line: 241 lines.
cascade_rl_add_flags_fingerprint(algorithms_bitwise_flags
  SOURCE "${CMAKE_CURRENT_LIST_DIR}/algorithms_fingerprint.cpp"
  MIN_LINES 210)

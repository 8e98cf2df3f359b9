# cascade_rl::verify, sandboxed execution rewards (issue 10); included from the top-level CMakeLists.txt.

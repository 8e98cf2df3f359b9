# Filled by the engine work (see the issue); included from the top-level CMakeLists.txt.

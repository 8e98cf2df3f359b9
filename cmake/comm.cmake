# Filled by the comm work (see the issue); included from the top-level CMakeLists.txt.

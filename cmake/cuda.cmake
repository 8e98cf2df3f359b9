# Filled by the cuda work (see the issue); included from the top-level CMakeLists.txt.

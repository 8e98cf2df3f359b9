# Registers the cuda tests; included from tests/CMakeLists.txt.

# Registers the comm tests; included from tests/CMakeLists.txt.

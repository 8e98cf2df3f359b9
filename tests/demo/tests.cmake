# Registers the demo tests (issue 4); included from tests/CMakeLists.txt.

# Registers the sandbox tests (issue 10); included from tests/CMakeLists.txt.

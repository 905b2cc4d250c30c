# The dlock command against real servers (tests/integration/test_cli.c). Included from
# tests/integration/CMakeLists.txt.
dlock_add_test(test_cli SOURCES test_cli.c itest.c LABELS integration)
# The test runs the built command ($DLOCK_CLI), so build it first.
add_dependencies(test_cli dlock_cli)

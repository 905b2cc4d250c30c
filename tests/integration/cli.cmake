# The dlock command against real servers (tests/integration/test_cli.c). Included from
# tests/integration/CMakeLists.txt.
dlock_add_test(test_cli SOURCES test_cli.c itest.c LABELS integration)
# The test runs the built command ($DLOCK_CLI), so build it first.
add_dependencies(test_cli dlock_cli)
# `dlock run` (tests/integration/test_run.c): it also checks that the man page
# (docs/dlock.1 and its source docs/dlock.1.md) names every command and exit code.
dlock_add_test(test_run SOURCES test_run.c itest.c LABELS integration)
add_dependencies(test_run dlock_cli)
target_compile_definitions(test_run PRIVATE DLOCK_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
# `dlock run` for a fleet's cron job, -E, -v, --once-per and --min-hold
# (tests/integration/test_schedule.c): real dlock processes on one server, three and
# file://, some under libfaketime. Its fleet starts fifteen dlock processes a second
# (slow ones in the sanitizer builds): run alone, so that no other test's timing shares
# the machine with it.
dlock_add_test(test_schedule SOURCES test_schedule.c itest.c LABELS integration)
add_dependencies(test_schedule dlock_cli)
set_tests_properties(test_schedule PROPERTIES RUN_SERIAL TRUE)
# The dlock command on local locks (-s file:///DIR): tests/integration/test_local_cli.c.
dlock_add_test(test_local_cli SOURCES test_local_cli.c itest.c LABELS integration)
add_dependencies(test_local_cli dlock_cli)
# `dlock stock ...` (tests/integration/test_stock_cli.c).
dlock_add_test(test_stock_cli SOURCES test_stock_cli.c itest.c LABELS integration)
add_dependencies(test_stock_cli dlock_cli)
# `dlock doctor` (tests/integration/test_doctor.c; its rules in tests/unit). It also
# starts a dlockd ($DLOCKD, through the dlockd tests' helpers), which doctor must refuse
# as a lock server.
dlock_add_test(test_doctor SOURCES test_doctor.c itest.c
  ${PROJECT_SOURCE_DIR}/tests/service/dtest.c LABELS integration)
target_include_directories(test_doctor PRIVATE ${PROJECT_SOURCE_DIR}/tests/service
  ${CMAKE_CURRENT_SOURCE_DIR})
add_dependencies(test_doctor dlock_cli dlockd)
set_property(TEST test_doctor APPEND PROPERTY ENVIRONMENT "DLOCKD=$<TARGET_FILE:dlockd>")
# The dlock command's TLS options against servers with TLS (test_tls_cli.c).
dlock_add_test(test_tls_cli SOURCES test_tls_cli.c itest.c LABELS integration)
add_dependencies(test_tls_cli dlock_cli)
# `dlock elect` and `dlock leader` (tests/integration/test_elect_cli.c): five candidates
# and a watcher, failovers after SIGKILL, and a leader whose server stops answering
# (a server of that test's own, so that the pause disturbs no other test).
dlock_add_test(test_elect_cli SOURCES test_elect_cli.c itest.c LABELS integration)
add_dependencies(test_elect_cli dlock_cli)

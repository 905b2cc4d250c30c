# The dlock command against real servers (tests/integration/test_cli.c; how it fails:
# test_cli_errors.c), each test running the built command ($DLOCK_CLI). Included from
# tests/integration/CMakeLists.txt, whose it_add_tests(... CLI) builds the command first.
it_add_tests(cli cli_errors CLI)
# `dlock run` (tests/integration/test_run.c): it also checks that the man page
# (docs/dlock.1 and its source docs/dlock.1.md) names every command and exit code.
# What CMD gets, and runs that do not get the lock: tests/integration/test_run_cmd.c.
it_add_tests(run run_cmd CLI)
target_compile_definitions(test_run PRIVATE DLOCK_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
# The helpers of the command's tests: failures, the token line, dlock in the background.
foreach(t cli cli_errors run run_cmd)
  target_sources(test_${t} PRIVATE itest_cli.c)
endforeach()
# `dlock run` for a fleet's cron job, -E, -v, --once-per and --min-hold
# (tests/integration/test_schedule.c): real dlock processes on one server, three and
# file://, some under libfaketime. Its fleet starts fifteen dlock processes a second
# (slow ones in the sanitizer builds): run alone, so that no other test's timing shares
# the machine with it.
it_add_tests(schedule CLI)
set_tests_properties(test_schedule PROPERTIES RUN_SERIAL TRUE)
it_add_tests(CLI
  # The dlock command on local locks (-s file:///DIR): tests/integration/test_local_cli.c.
  local_cli
  # `dlock stock ...` (tests/integration/test_stock_cli.c).
  stock_cli
  # The dlock command's TLS options against servers with TLS (test_tls_cli.c).
  tls_cli
  # `dlock elect` and `dlock leader` (tests/integration/test_elect_cli.c): five candidates
  # and a watcher, failovers after SIGKILL, and a leader whose server stops answering
  # (a server of that test's own, so that the pause disturbs no other test).
  elect_cli)
# `dlock doctor` (tests/integration/test_doctor.c; its rules in tests/unit). It also
# starts a dlockd ($DLOCKD, through the dlockd tests' helpers), which doctor must refuse
# as a lock server.
dlock_add_test(test_doctor SOURCES test_doctor.c itest.c
  ${PROJECT_SOURCE_DIR}/tests/service/dtest.c ${PROJECT_SOURCE_DIR}/tests/service/dexpect.c
  LABELS integration)
target_include_directories(test_doctor PRIVATE ${PROJECT_SOURCE_DIR}/tests/service
  ${CMAKE_CURRENT_SOURCE_DIR})
add_dependencies(test_doctor dlock_cli dlockd)
set_property(TEST test_doctor APPEND PROPERTY ENVIRONMENT "DLOCKD=$<TARGET_FILE:dlockd>")

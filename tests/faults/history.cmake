# The history file, its checkers and the worker processes (tests/faults/history.c,
# history_check.c, workers.c, scenario.c), and the process and server scenarios that
# use them: contention, a holder that crashes, a waiter that dies, paused and
# restarted servers, a server crash, clock jumps, failover and the lifecycle checks,
# plus the soak.
#
# Labels: "faults;quick" scenarios run in `make test` (together well under 90 s);
# "faults;slow" only in `make test-faults`; the soak ("soak" only, never "faults")
# runs 10 minutes (DLOCK_SOAK_SECONDS sets it; CI runs 120 s): ctest -L soak.
#
# History and workers are built once, as a static library. It calls the dlock API
# without linking a build of the library: each test links the shipped or the hooked
# build (dlock_add_test's HOOKS), and that one resolves the calls.
add_library(dlock_fault_history STATIC ${CMAKE_CURRENT_LIST_DIR}/history.c
  ${CMAKE_CURRENT_LIST_DIR}/history_check.c
  ${CMAKE_CURRENT_LIST_DIR}/workers.c ${CMAKE_CURRENT_LIST_DIR}/scenario.c)
target_include_directories(dlock_fault_history PUBLIC ${CMAKE_CURRENT_LIST_DIR}
  PRIVATE ${PROJECT_SOURCE_DIR}/include)
target_link_libraries(dlock_fault_history PUBLIC dlock_test_support)
target_compile_definitions(dlock_fault_history PRIVATE _GNU_SOURCE)
dlock_warnings(dlock_fault_history)

# dlock_history_test(NAME SOURCE LABEL... [HOOKS]): a scenario linked with the history
# library and the integration helpers.
function(dlock_history_test name source)
  dlock_add_test(${name} SOURCES ${CMAKE_CURRENT_LIST_DIR}/${source}
    ${PROJECT_SOURCE_DIR}/tests/integration/itest.c LIBS dlock_fault_history LABELS ${ARGN})
endfunction()

# The checkers on hand-written histories: they see what they must.
dlock_history_test(fault_history test_history.c faults quick)
dlock_history_test(fault_contention test_contention.c faults quick)
dlock_history_test(fault_holder_crash test_holder_crash.c faults quick)
dlock_history_test(fault_dead_waiter test_dead_waiter.c faults quick)
dlock_history_test(fault_pause test_pause.c faults quick)
dlock_history_test(fault_restart test_restart.c faults quick)
dlock_history_test(fault_server_crash test_server_crash.c faults slow)
dlock_history_test(fault_clockjump test_clockjump.c faults quick HOOKS)
dlock_history_test(fault_failover test_failover.c faults quick)
dlock_history_test(fault_lifecycle test_lifecycle.c faults quick HOOKS)

# The soak: 10 minutes by default, so its own timeout; CI runs it for 120 s apart.
dlock_history_test(fault_soak test_soak.c soak HOOKS)
set_tests_properties(fault_soak PROPERTIES TIMEOUT 1200)
# Holders and waiters SIGKILLed at random instants of the whole lifecycle.
dlock_history_test(fault_killpoints test_killpoints.c faults slow)
# Waiters paused and killed at the grant, where they may start on its message.
dlock_history_test(fault_grant test_grant.c faults quick HOOKS)
# Holders whose releases linger (linger_ms), paused and killed while they hold, linger
# and take the lock back.
dlock_history_test(fault_linger test_linger.c faults quick)

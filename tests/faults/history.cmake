# The history file, its checkers and the worker processes (tests/faults/history.c,
# workers.c), and the process and server scenarios of issue 7 that use them: 1, 2, 3,
# 6, 7, 8, 15 and the parts of 16 that need no allocation hooks, plus the soak.
#
# Labels: "faults;quick" scenarios run in `make test` (together well under 90 s);
# "faults;slow" only in `make test-faults`; the soak ("soak" only, never "faults")
# runs 10 minutes (DLOCK_SOAK_SECONDS shortens it): ctest -L soak.
set(_hist ${CMAKE_CURRENT_LIST_DIR}/history.c ${CMAKE_CURRENT_LIST_DIR}/workers.c
  ${PROJECT_SOURCE_DIR}/tests/integration/itest.c)

# The checkers on hand-written histories: they see what they must.
dlock_add_test(fault_history SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_history.c ${_hist}
  LABELS faults quick)
dlock_add_test(fault_contention SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_contention.c ${_hist}
  LABELS faults quick)
dlock_add_test(fault_holder_crash SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_holder_crash.c ${_hist}
  LABELS faults quick)
dlock_add_test(fault_dead_waiter SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_dead_waiter.c ${_hist}
  LABELS faults quick)
dlock_add_test(fault_pause SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_pause.c ${_hist}
  LABELS faults quick)
dlock_add_test(fault_restart SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_restart.c ${_hist}
  LABELS faults quick)
dlock_add_test(fault_server_crash SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_server_crash.c
  ${_hist} LABELS faults slow)
dlock_add_test(fault_clockjump SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_clockjump.c ${_hist}
  LABELS faults quick HOOKS)
dlock_add_test(fault_failover SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_failover.c ${_hist}
  LABELS faults quick)
dlock_add_test(fault_lifecycle SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_lifecycle.c ${_hist}
  LABELS faults quick HOOKS)

# The soak: 10 minutes by default, so its own timeout; never in a CI tier.
dlock_add_test(fault_soak SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_soak.c ${_hist} LABELS soak)
set_tests_properties(fault_soak PROPERTIES TIMEOUT 1200)

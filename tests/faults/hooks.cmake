# Scenarios that use the client hooks (src/hooks.h): the test build of the library.
set(_it ${PROJECT_SOURCE_DIR}/tests/integration/itest.c)
dlock_add_test(fault_client_clock SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_client_clock.c ${_it}
  LABELS faults quick HOOKS)
dlock_add_test(fault_races SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_races.c ${_it}
  LABELS faults quick HOOKS)
dlock_add_test(fault_alloc SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_alloc.c ${_it}
  LABELS faults quick HOOKS)

# The lock servers' own clocks faulted (test_serverclock.c): redis-servers under
# libfaketime, stepped, fast and skewed, within and beyond the assumptions.
dlock_add_test(fault_serverclock SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_serverclock.c
  ${PROJECT_SOURCE_DIR}/tests/integration/itest.c LABELS faults slow)

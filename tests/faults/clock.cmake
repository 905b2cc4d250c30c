# The lock servers' own clocks faulted (test_serverclock.c): redis-servers under
# libfaketime, stepped, fast and skewed, within and beyond the assumptions.
# Its resource server is the scenario scaffolding's (workers.c).
dlock_history_test(fault_serverclock test_serverclock.c faults slow)

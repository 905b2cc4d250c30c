# Scenario 12, partitions on a private network of namespaces (netns.h): root, ip and
# iptables are required, and their absence fails the test with a message (never a
# skip). About a minute, hence "slow": `make test-faults` and CI run it, `make test`
# does not. RUN_SERIAL: its bound on call durations (deadline + 100 ms) is about this
# machine's timing, which tests running beside it on two cores would disturb.
# partition.c is the scenarios' harness: workers, phases and the checks of each.
dlock_add_test(fault_partition
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_partition.c ${CMAKE_CURRENT_LIST_DIR}/partition.c
  ${CMAKE_CURRENT_LIST_DIR}/netns.c
  LABELS faults slow)
set_tests_properties(fault_partition PROPERTIES RUN_SERIAL TRUE)

# The fault relay (relay.c) and the scenarios that use it or real server error states
# (issue 7, scenarios 4, 5, 12 without netns, 13 and 14).
#
# The relay is test code built once, as a static library that each scenario links.
add_library(dlock_fault_relay STATIC ${CMAKE_CURRENT_LIST_DIR}/relay.c)
target_link_libraries(dlock_fault_relay PUBLIC dlock_test_harness PkgConfig::HIREDIS Threads::Threads)
target_compile_definitions(dlock_fault_relay PRIVATE _GNU_SOURCE)
dlock_warnings(dlock_fault_relay)

set(_relay_itest ${PROJECT_SOURCE_DIR}/tests/integration/itest.c)

# dlock_relay_test(NAME SOURCE LABEL...): a scenario linked with the relay.
function(dlock_relay_test name source)
  dlock_add_test(${name} SOURCES ${CMAKE_CURRENT_LIST_DIR}/${source} ${_relay_itest}
    LABELS faults ${ARGN})
  target_link_libraries(${name} PRIVATE dlock_fault_relay)
endfunction()

# Quick ones run in `make test` (about 45 s together); slow ones in `make test-faults`.
dlock_relay_test(fault_relay test_relay.c quick)                 # the relay itself
dlock_relay_test(fault_inflight test_relay_inflight.c quick)     # scenario 4
dlock_relay_test(fault_paused_nodes test_relay_paused.c quick)   # scenario 5
dlock_relay_test(fault_protocol test_protocol.c quick)           # scenario 13
dlock_relay_test(fault_server_states test_server_states.c quick) # scenario 14
dlock_relay_test(fault_partition_relay test_relay_partition.c slow) # scenario 12, relay part

# The scenarios that use the fault relay (tests/support/relay.h, part of the support
# library every test links) or real server error states: replies in flight when a
# node fails, paused nodes, partitions made by the relay, protocol surprises and
# servers in error states; and the relay's own tests.

# dlock_relay_test(NAME SOURCE LABEL...): a scenario with the integration helpers.
function(dlock_relay_test name source)
  dlock_add_test(${name} SOURCES ${CMAKE_CURRENT_LIST_DIR}/${source}
    ${PROJECT_SOURCE_DIR}/tests/integration/itest.c LABELS faults ${ARGN})
endfunction()

# Quick ones run in `make test` (about 45 s together); slow ones in `make test-faults`.
dlock_relay_test(fault_relay test_relay.c quick)                    # the relay itself
dlock_relay_test(fault_inflight test_relay_inflight.c quick)        # replies in flight
dlock_relay_test(fault_paused_nodes test_relay_paused.c quick)      # paused nodes
dlock_relay_test(fault_protocol test_protocol.c quick)              # protocol surprises
dlock_relay_test(fault_protocol_path test_protocol_path.c quick)    # replies broken on the way
dlock_relay_test(fault_server_states test_server_states.c quick)    # server error states
dlock_relay_test(fault_partition_relay test_relay_partition.c slow) # partitions, relay

# The two protocol scenarios share their fixture: servers behind relays, a client.
foreach(_t fault_protocol fault_protocol_path)
  target_sources(${_t} PRIVATE ${CMAKE_CURRENT_LIST_DIR}/protocol.c)
endforeach()

package kafkax

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// statsJSON is librdkafka's statistics in the shape STATISTICS.md gives:
// two brokers (and a bootstrap entry without a node id), the group, and
// topic t's partitions -1 (the unassigned queue), 0 (led by broker 1) and
// 1 (led by broker 2).
func statsJSON(group, broker2 string, leader1 int32, desired1 bool, msgs1 int) string {
	cgrp := ""
	if group != "" {
		cgrp = fmt.Sprintf(`,"cgrp":{"state":%q,"stateage":5000,"join_state":"steady"}`, group)
	}
	return fmt.Sprintf(`{"name":"c#consumer-1","type":"consumer","ts":1,
 "brokers":{"h:9092/bootstrap":{"name":"h:9092/bootstrap","nodeid":-1,"state":"INIT"},
  "h:9093/1":{"name":"h:9093/1","nodeid":1,"state":"UP"},
  "h:9094/2":{"name":"h:9094/2","nodeid":2,"state":%q}},
 "topics":{"t":{"topic":"t","partitions":{
  "-1":{"partition":-1,"leader":-1,"desired":false,"msgs":9},
  "0":{"partition":0,"leader":1,"desired":true,"msgs":0},
  "1":{"partition":1,"leader":%d,"desired":%t,"msgs":%d}}}}%s}`,
		broker2, leader1, desired1, msgs1, cgrp)
}

// TestLinkHealth: a problem is reported once it has lasted linkGrace, and
// only for what the client needs; it clears with the first statistics
// without it, and restarts its grace when it comes back.
func TestLinkHealth(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	consumer := &linkHealth{topic: "t"}
	producer := &linkHealth{}

	consumer.observe(t0, statsJSON("up", "UP", 2, true, 0))
	require.Empty(t, consumer.problem(), "all well")

	// Broker 2, leader of the assigned partition 1, unreachable: its
	// connection cycles through states, the grace runs through them.
	consumer.observe(t0, statsJSON("up", "CONNECT", 2, true, 0))
	consumer.observe(t0.Add(linkGrace-time.Millisecond), statsJSON("up", "DOWN", 2, true, 0))
	require.Empty(t, consumer.problem(), "within the grace")
	consumer.observe(t0.Add(linkGrace), statsJSON("up", "DOWN", 2, true, 0))
	require.Equal(t, "t[1]: its leader, broker 2, is not reachable (connection state DOWN)", consumer.problem())
	consumer.observe(t0.Add(linkGrace+time.Second), statsJSON("up", "UP", 2, true, 0))
	require.Empty(t, consumer.problem(), "cleared")
	consumer.observe(t0.Add(linkGrace+2*time.Second), statsJSON("up", "DOWN", 2, true, 0))
	require.Empty(t, consumer.problem(), "its grace starts again")

	// Not assigned: not needed.
	other := &linkHealth{topic: "t"}
	other.observe(t0, statsJSON("up", "DOWN", 2, false, 0))
	other.observe(t0.Add(time.Minute), statsJSON("up", "DOWN", 2, false, 0))
	require.Empty(t, other.problem())

	// The coordinator, and a partition without a leader.
	other.observe(t0.Add(2*time.Minute), statsJSON("wait-coord", "UP", -1, true, 0))
	other.observe(t0.Add(3*time.Minute), statsJSON("query-coord", "UP", -1, true, 0))
	require.Equal(t, `t[1] has no leader; the consumer group's coordinator is not reachable (librdkafka group state "query-coord")`, other.problem(),
		"the grace runs through the states in between")

	// The producer needs the leaders of partitions it produced to within
	// linkGrace (its count of records for them grew).
	producer.observe(t0, statsJSON("", "DOWN", 2, false, 5))
	producer.observe(t0.Add(time.Minute), statsJSON("", "DOWN", 2, false, 5))
	require.Empty(t, producer.problem(), "nothing produced to it lately")
	producer.observe(t0.Add(2*time.Minute), statsJSON("", "DOWN", 2, false, 6))
	producer.observe(t0.Add(2*time.Minute+linkGrace), statsJSON("", "DOWN", 2, false, 7))
	require.Equal(t, "t[1]: its leader, broker 2, is not reachable (connection state DOWN)", producer.problem())
	producer.observe(t0.Add(2*time.Minute+linkGrace+time.Second), statsJSON("", "DOWN", 7, false, 8))
	require.Equal(t, "t[1]: its leader, broker 7, is not connected", producer.problem())

	// Sent again after a wait (the relay's postponed rows): the grace runs
	// through the wait; linkGrace without a record for it drops it.
	gap := &linkHealth{}
	gap.observe(t0, statsJSON("", "DOWN", 2, false, 1))
	gap.observe(t0.Add(time.Second), statsJSON("", "DOWN", 2, false, 2))
	gap.observe(t0.Add(6*time.Second), statsJSON("", "DOWN", 2, false, 2))
	gap.observe(t0.Add(linkGrace+time.Second), statsJSON("", "DOWN", 2, false, 3))
	require.Equal(t, "t[1]: its leader, broker 2, is not reachable (connection state DOWN)", gap.problem(), "the grace ran through the wait")
	gap.observe(t0.Add(3*linkGrace), statsJSON("", "DOWN", 2, false, 3))
	require.Empty(t, gap.problem(), "nothing produced to it for linkGrace: dropped")

	// Not the JSON it expects: no verdict, the last one stands.
	producer.observe(t0.Add(2*time.Minute+linkGrace+2*time.Second), "{")
	require.Equal(t, "t[1]: its leader, broker 7, is not connected", producer.problem())
}

package kafkax

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pcp/route-processing/pkg/record"
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
  "-1":{"partition":-1,"broker":-1,"leader":-1,"desired":false,"msgs":9},
  "0":{"partition":0,"broker":1,"leader":1,"desired":true,"msgs":0},
  "1":{"partition":1,"broker":%d,"leader":%d,"desired":%t,"msgs":%d}}}}%s}`,
		broker2, leader1, leader1, desired1, msgs1, cgrp)
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

	// Records counted in the client's first statistics were produced within
	// its first second: their leader is needed. A partition listed but
	// never produced to is not.
	fresh := &linkHealth{needFor: 30*time.Second + linkGrace}
	fresh.observe(t0, statsJSON("", "DOWN", 2, false, 3))
	fresh.observe(t0.Add(linkGrace), statsJSON("", "DOWN", 2, false, 3))
	require.Equal(t, "t[1]: its leader, broker 2, is not reachable (connection state DOWN)", fresh.problem())
	unused := &linkHealth{needFor: 30*time.Second + linkGrace}
	unused.observe(t0, statsJSON("", "DOWN", 2, false, 0))
	unused.observe(t0.Add(linkGrace), statsJSON("", "DOWN", 2, false, 0))
	require.Empty(t, unused.problem())

	// A record waits for its leader up to the delivery timeout, 30 s, and
	// the relay sends its row again a second after: produced to every 31
	// s, the partition stays needed and its problem reported throughout;
	// nothing produced to it for needFor drops it.
	gap := &linkHealth{needFor: 30*time.Second + linkGrace}
	gap.observe(t0, statsJSON("", "DOWN", 2, false, 1))
	reported := 0
	for sec := 1; sec <= 100; sec++ {
		gap.observe(t0.Add(time.Duration(sec)*time.Second), statsJSON("", "DOWN", 2, false, 2+sec/31))
		if sec > int(linkGrace/time.Second) {
			require.Equal(t, "t[1]: its leader, broker 2, is not reachable (connection state DOWN)", gap.problem(), "second %d", sec)
			reported++
		}
	}
	require.Equal(t, 90, reported)
	gap.observe(t0.Add(93*time.Second+30*time.Second+linkGrace), statsJSON("", "DOWN", 2, false, 5))
	require.Empty(t, gap.problem(), "nothing produced to it for needFor: dropped")

	// Fetched from a follower (client.rack): that broker is the one needed.
	follower := &linkHealth{topic: "t"}
	fromFollower := strings.Replace(statsJSON("up", "DOWN", 1, true, 0), `"partition":1,"broker":1`, `"partition":1,"broker":2`, 1)
	follower.observe(t0, fromFollower)
	follower.observe(t0.Add(linkGrace), fromFollower)
	require.Equal(t, "t[1]: its broker, broker 2, is not reachable (connection state DOWN)", follower.problem())

	// Not the JSON it expects: no verdict, and none kept.
	producer.observe(t0.Add(2*time.Minute+linkGrace+2*time.Second), "{")
	require.Empty(t, producer.problem())
}

// A probe no broker answered restarts every problem's grace: after a
// frozen broker thaws, the statistics still show the connection set up
// during the freeze for seconds, and that is not a lack of the cluster
// that answers again. A missing topic, or the caller's own end, says
// nothing of the brokers.
func TestLinkHealthRestartsWhenNoBrokerAnswers(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	h := &linkHealth{topic: "t"}
	down := statsJSON("up", "APIVERSION_QUERY", 2, true, 0)
	lasting := func() {
		h.observe(t0, down)
		h.observe(t0.Add(linkGrace), down)
		require.NotEmpty(t, h.problem())
	}
	ctx := context.Background()
	lasting()
	require.ErrorContains(t, h.probed(ctx, &record.TopicError{Topic: "t", Err: errors.New("unknown")}), "unknown")
	require.NotEmpty(t, h.problem(), "a broker answered without the topic")
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	require.Error(t, h.probed(cancelled, context.Canceled))
	require.NotEmpty(t, h.problem(), "the caller ended")
	require.NoError(t, h.probed(ctx, nil))
	require.NotEmpty(t, h.problem())

	require.Error(t, h.probed(ctx, errors.New("kafka metadata: Local: Timed out")))
	require.Empty(t, h.problem(), "no broker answered")
	h.observe(t0.Add(linkGrace+time.Second), down)
	require.Empty(t, h.problem(), "its grace starts anew")
	h.observe(t0.Add(2*linkGrace+time.Second), down)
	require.NotEmpty(t, h.problem())
}

// silenceStats is a consumer's statistics with its partition t[0] led by
// broker 1, and the group's coordinator at broker 1 through the logical
// GroupCoordinator connection: leader and coord are those two
// connections.
func silenceStats(t *testing.T, joinState string, leader, coord rdBroker) string {
	t.Helper()
	leader.Name, leader.NodeID, leader.NodeName, leader.Source = "h:9093/1", 1, "h:9093", "learned"
	coord.Name, coord.NodeID, coord.NodeName, coord.Source = "GroupCoordinator", -1, "h:9093", "logical"
	st := map[string]any{
		"brokers": map[string]rdBroker{leader.Name: leader, coord.Name: coord},
		"topics": map[string]any{"t": map[string]any{"partitions": map[string]rdPartition{
			"0": {Partition: 0, Leader: 1, Broker: 1, Desired: true}}}},
		"cgrp": map[string]string{"state": "up", "join_state": joinState},
	}
	b, err := json.Marshal(st)
	require.NoError(t, err)
	return string(b)
}

// conn is a connection's state in silenceStats: its state, the requests
// it owes and the time since it last received anything.
func conn(state string, owes int64, rxIdle time.Duration) rdBroker {
	return rdBroker{State: state, WaitResp: owes, RxIdle: rxIdle.Microseconds()}
}

// TestLinkHealthSilence: a broker whose connection stays UP but which
// owes answers and sends nothing back (a link that drops packets without a
// reset) is a problem once its silence has outlasted the client's own
// wait (answerWithin) and linkGrace; the quiet of an idle connection
// before a request is not silence, nor is a JoinGroup held while the group
// rebalances. Each of the first three checks fails on a linkHealth that
// reads only connection states (the measured case: a silent leader
// reported after 72 s, a silent coordinator never).
func TestLinkHealthSilence(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	up := conn("UP", 0, 100*time.Millisecond)
	const wait = 500 * time.Millisecond
	leaderSilent := "t[0]: its leader, broker 1, does not answer (requests outstanding, nothing received for over 10.5s)"

	// The input leader falls silent at t0: its fetch was answered every
	// 100 ms until then.
	h := &linkHealth{topic: "t", answerWithin: wait}
	for s := -5; s <= 10; s++ {
		idle := max(time.Duration(s)*time.Second, 100*time.Millisecond)
		h.observe(t0.Add(time.Duration(s)*time.Second), silenceStats(t, "steady", conn("UP", 1, idle), up))
	}
	require.Empty(t, h.problem(), "10 s of silence: within the fetch wait and the grace")
	h.observe(t0.Add(11*time.Second), silenceStats(t, "steady", conn("UP", 1, 11*time.Second), up))
	require.Equal(t, leaderSilent, h.problem())

	// A probe no broker answered keeps a silence (it is why the probe,
	// sent to the silent broker, failed) where it forgets a connection's
	// state (TestLinkHealthRestartsWhenNoBrokerAnswers); the first
	// statistics after the broker answers end it.
	ctx := context.Background()
	require.Error(t, h.probed(ctx, errors.New("kafka metadata: Local: Timed out")))
	require.Equal(t, leaderSilent, h.problem(), "kept through a probe no broker answered")
	require.NoError(t, h.probed(ctx, nil))
	h.observe(t0.Add(12*time.Second), silenceStats(t, "steady", conn("UP", 1, 12*time.Second), up))
	require.Equal(t, leaderSilent, h.problem())
	h.observe(t0.Add(13*time.Second), silenceStats(t, "steady", conn("UP", 1, 50*time.Millisecond), up))
	require.Empty(t, h.problem(), "it answered")

	// The coordinator falls silent while the group is steady (a heartbeat
	// unanswered); the group then rebalances (its session ran out), which
	// neither clears nor dates the problem, and the connection is set up
	// anew, in vain.
	g := &linkHealth{topic: "t", answerWithin: wait}
	fetching := conn("UP", 1, 100*time.Millisecond)
	g.observe(t0, silenceStats(t, "steady", fetching, up))
	for s := 1; s <= 9; s++ {
		g.observe(t0.Add(time.Duration(s)*time.Second), silenceStats(t, "steady", fetching, conn("UP", 1, time.Duration(s+2)*time.Second)))
	}
	rebalancing := func(s int) {
		g.observe(t0.Add(time.Duration(s)*time.Second), silenceStats(t, "wait-join", fetching, conn("UP", 2, time.Duration(s+2)*time.Second)))
	}
	rebalancing(10)
	rebalancing(11)
	require.Empty(t, g.problem(), "owed answers since 1 s: 10.5 s of silence at 11.5 s")
	rebalancing(12)
	require.Equal(t, "the consumer group's coordinator, at h:9093, does not answer (requests outstanding, nothing received for over 10.5s)", g.problem(),
		"kept through the rebalance")
	g.observe(t0.Add(15*time.Second), silenceStats(t, "wait-join", fetching, conn("APIVERSION_QUERY", 1, -time.Microsecond)))
	require.Equal(t, "the consumer group's coordinator, at h:9093, is not reachable (connection state APIVERSION_QUERY)", g.problem(),
		"the grace ran from the unanswered heartbeat")

	// A coordinator silent for a while, which then answers as a rebalance
	// begins (its JoinGroup held for the other members): the silence is
	// over, the rebalance says nothing more.
	r := &linkHealth{topic: "t", answerWithin: wait}
	r.observe(t0, silenceStats(t, "steady", fetching, up))
	for s := 1; s <= 6; s++ {
		r.observe(t0.Add(time.Duration(s)*time.Second), silenceStats(t, "steady", fetching, conn("UP", 1, time.Duration(s)*time.Second)))
	}
	for s := 7; s <= 20; s++ {
		r.observe(t0.Add(time.Duration(s)*time.Second), silenceStats(t, "wait-join", fetching, conn("UP", 1, time.Duration(s-6)*time.Second)))
		require.Empty(t, r.problem(), "second %d: it answered at 6 s", s)
	}

	// Not silence: a request sent on a connection idle for a minute (its
	// quiet came before the request), one busy connection answering, and
	// a JoinGroup that the coordinator holds for a rebalance.
	q := &linkHealth{topic: "t", answerWithin: wait}
	q.observe(t0, silenceStats(t, "steady", conn("UP", 0, time.Minute), up))
	q.observe(t0.Add(time.Second), silenceStats(t, "steady", conn("UP", 1, time.Minute+time.Second), up))
	q.observe(t0.Add(2*time.Second), silenceStats(t, "steady", conn("UP", 0, 10*time.Millisecond), up))
	for s := 3; s <= 60; s++ {
		q.observe(t0.Add(time.Duration(s)*time.Second), silenceStats(t, "wait-join", conn("UP", 3, 200*time.Millisecond), conn("UP", 1, time.Duration(s)*time.Second)))
	}
	require.Empty(t, q.problem())

	// A slow link (replies 2 s late each way): the producer always owes
	// the leader a request, and hears from it every few seconds. Each
	// silence is short; together they are no problem.
	slow := &linkHealth{}
	produced := 0
	for s := 0; s <= 60; s++ {
		produced++
		st := strings.Replace(statsJSON("", "UP", 2, false, produced), `"nodeid":2,"state":"UP"`,
			fmt.Sprintf(`"nodeid":2,"state":"UP","waitresp_cnt":2,"rxidle":%d`, (time.Duration(s%4)*time.Second+500*time.Millisecond).Microseconds()), 1)
		slow.observe(t0.Add(time.Duration(s)*time.Second), st)
		require.Empty(t, slow.problem(), "second %d", s)
	}
}

package e2e

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pcp/route-processing/pkg/passport"
	"github.com/pcp/route-processing/pkg/passportgen"
)

// relayWorkers and relayBatch bound what one relay has claimed but not yet
// marked at any moment: its workers (two, pkg/relay) each hold at most one
// batch of OUTBOX_BATCH_SIZE rows (default 500). A SIGKILL can only cause
// those rows to be published again, so duplicates ≤ relay kills × this.
const (
	relayWorkers = 2
	relayBatch   = 500
)

// TestResilience builds the Binaries once and runs the five scenarios, two at
// a time (t.Parallel; -parallel defaults to GOMAXPROCS). Each scenario has a
// PostgreSQL cluster, a broker process and topics of its own.
func TestResilience(t *testing.T) {
	bins := BuildBinaries(t, t.TempDir())
	t.Run("crash-loop", func(t *testing.T) { t.Parallel(); testCrashLoop(t, bins) })
	t.Run("database-restart", func(t *testing.T) { t.Parallel(); testDatabaseRestart(t, bins) })
	t.Run("broker-outage", func(t *testing.T) { t.Parallel(); testBrokerOutage(t, bins) })
	t.Run("hostile-input", func(t *testing.T) { t.Parallel(); testHostileInput(t, bins) })
	t.Run("ingestor-takeover", func(t *testing.T) { t.Parallel(); testIngestorTakeover(t, bins) })
}

// chaos kills the ingestor and the relay with SIGKILL at random moments, 1–3 s
// apart, and starts each again at once (without waiting for readiness: the
// next kill may come while it is still starting, as in a crash-looping pod).
type chaos struct {
	stop chan struct{}
	done chan struct{}

	mu        sync.Mutex
	kills     map[string]int
	startErrs []error
}

func startChaos(s *stack, seed uint64) *chaos {
	c := &chaos{stop: make(chan struct{}), done: make(chan struct{}), kills: map[string]int{}}
	rng := rand.New(rand.NewPCG(seed, seed))
	go func() {
		defer close(c.done)
		for {
			select {
			case <-c.stop:
				return
			case <-time.After(time.Second + time.Duration(rng.Int64N(int64(2*time.Second)))):
			}
			var victims []*Proc
			switch p := rng.Float64(); {
			case p < 0.4:
				victims = []*Proc{s.ingestor}
			case p < 0.8:
				victims = []*Proc{s.relay}
			default:
				victims = []*Proc{s.ingestor, s.relay}
			}
			for _, v := range victims {
				v.Kill9()
				err := v.StartErr()
				c.mu.Lock()
				c.kills[v.name]++
				if err != nil {
					c.startErrs = append(c.startErrs, err)
				}
				c.mu.Unlock()
			}
		}
	}()
	return c
}

func (c *chaos) halt() (map[string]int, []error) {
	close(c.stop)
	<-c.done
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.kills, c.startErrs
}

// testCrashLoop: 10,000 passports while both Binaries are killed -9 every
// 1–3 s. Nothing may be lost; duplicates are bounded by what a killed relay
// can have in flight.
func testCrashLoop(t *testing.T, bins Binaries) {
	const n = 10_000
	start := time.Now()
	s := newStack(t, bins, "crash", stackOptions{StaticMember: true})
	s.startBoth()
	recs := GenValid(1, n)

	p := NewProducer(t, s.bootstrap, s.topics.Input)
	c := startChaos(s, 11)
	// 500/s: 20 s of production under fire.
	p.Stream(context.Background(), recs, 500, nil)
	p.Wait(3 * time.Minute)
	// Keep killing a little after the last record, while the backlog drains.
	time.Sleep(5 * time.Second)
	kills, errs := c.halt()
	for _, err := range errs {
		t.Errorf("restart after kill: %v", err)
	}
	// Leave both running until everything converged.
	for _, pr := range []*Proc{s.ingestor, s.relay} {
		if !pr.Running() {
			pr.Start()
		}
		pr.WaitReady(90 * time.Second)
	}
	converge(t, s, 2*n, 3*time.Minute)
	v := s.tally(recs)
	bound := kills["outbox-relay"] * relayWorkers * relayBatch
	report(t, "crash-loop", v.String(),
		fmt.Sprintf("kills=ingestor:%d,relay:%d", kills["ingestor"], kills["outbox-relay"]),
		fmt.Sprintf("duplicate-bound=%d", bound),
		fmt.Sprintf("elapsed=%s", time.Since(start).Round(time.Second)))
	for _, d := range v.Details {
		t.Log(d)
	}
	if v.Lost != 0 {
		t.Errorf("lost %d, want 0", v.Lost)
	}
	if v.DLQ != 0 || v.Failed != 0 {
		t.Errorf("dlq=%d failed=%d, want 0 and 0", v.DLQ, v.Failed)
	}
	if v.Published != 2*n {
		t.Errorf("published %d outbox rows, want %d", v.Published, 2*n)
	}
	if v.Duplicates > bound {
		t.Errorf("duplicates %d exceed the bound %d (relay kills × workers × batch size)", v.Duplicates, bound)
	}
	if kills["ingestor"] == 0 || kills["outbox-relay"] == 0 {
		t.Errorf("chaos killed ingestor %d and relay %d times; want both killed", kills["ingestor"], kills["outbox-relay"])
	}
}

// outageWatch polls a process's /readyz during an outage.
type outageWatch struct {
	notReady, polls int
	healthzDown     int
}

func watch(p *Proc, d time.Duration) outageWatch {
	var w outageWatch
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		w.polls++
		if !p.Ready() {
			w.notReady++
		}
		if p.Healthz() != 200 {
			w.healthzDown++
		}
		time.Sleep(250 * time.Millisecond)
	}
	return w
}

// testDatabaseRestart: PostgreSQL stopped for 20 s mid-stream, then started.
// Nothing lost, nothing dead-lettered, everything published, and the
// ingestor said not-ready meanwhile without exiting.
func testDatabaseRestart(t *testing.T, bins Binaries) {
	const n = 6_000
	start := time.Now()
	s := newStack(t, bins, "pgrestart", stackOptions{})
	s.startBoth()
	recs := GenValid(2, n)
	ingPID, relayPID := s.ingestor.PID(), s.relay.PID()

	p := NewProducer(t, s.bootstrap, s.topics.Input)
	streamed := streamAsync(p, recs, 200) // 30 s
	time.Sleep(5 * time.Second)
	s.pg.Stop(t)
	down := time.Now()
	w := watch(s.ingestor, 20*time.Second)
	s.pg.Start(t)
	outage := time.Since(down)
	v := finish(t, s, p, streamed, recs, nil, 3*time.Minute)
	report(t, "database-restart", v.String(),
		fmt.Sprintf("outage=%s", outage.Round(100*time.Millisecond)),
		fmt.Sprintf("ingestor-not-ready=%d/%d", w.notReady, w.polls),
		exits(s),
		fmt.Sprintf("elapsed=%s", time.Since(start).Round(time.Second)))
	checkClean(t, v, 2*n, 0)
	if w.notReady == 0 {
		t.Errorf("ingestor /readyz stayed 200 while PostgreSQL was down (contract §1.5: reports not-ready)")
	}
	if s.ingestor.Unexpected() != 0 || s.ingestor.PID() != ingPID || s.relay.Unexpected() != 0 || s.relay.PID() != relayPID {
		t.Errorf("a process exited during the outage (ingestor exits %d, relay exits %d); the contract wants them to keep retrying",
			s.ingestor.Unexpected(), s.relay.Unexpected())
	}
	if !s.ingestor.Ready() || !s.relay.Ready() {
		t.Errorf("not ready again after the outage: ingestor %v, relay %v", s.ingestor.Ready(), s.relay.Ready())
	}
}

// testBrokerOutage: the broker frozen (SIGSTOP) for 30 s mid-stream, then
// continued. Nothing lost, no FAILED rows, everything published.
func testBrokerOutage(t *testing.T, bins Binaries) {
	const n = 8_000
	start := time.Now()
	s := newStack(t, bins, "brokerout", stackOptions{})
	s.startBoth()
	recs := GenValid(3, n)

	p := NewProducer(t, s.bootstrap, s.topics.Input)
	streamed := streamAsync(p, recs, 200) // 40 s
	time.Sleep(5 * time.Second)
	s.broker.Pause(t)
	frozen := time.Now()
	w := watch(s.relay, 30*time.Second)
	s.broker.Resume(t)
	outage := time.Since(frozen)
	v := finish(t, s, p, streamed, recs, nil, 3*time.Minute)
	retries, _ := s.relay.Metric("route_passport_outbox_retry_total")
	report(t, "broker-outage", v.String(),
		fmt.Sprintf("outage=%s", outage.Round(100*time.Millisecond)),
		fmt.Sprintf("relay-not-ready=%d/%d", w.notReady, w.polls),
		fmt.Sprintf("relay-retries=%.0f", retries),
		exits(s),
		fmt.Sprintf("elapsed=%s", time.Since(start).Round(time.Second)))
	checkClean(t, v, 2*n, 0)
	checkNoExits(t, s)
}

// testHostileInput: 2,000 records, most of them hostile, mixed with valid
// ones. The ingestor stays up, every record is either accepted or
// dead-lettered (exactly one of the two, matched by partition and offset),
// and the group commits to the end of every partition.
func testHostileInput(t *testing.T, bins Binaries) {
	const n = 2_000
	start := time.Now()
	s := newStack(t, bins, "hostile", stackOptions{InputMaxMessageBytes: 8 << 20})
	s.startBoth()
	pid := s.ingestor.PID()

	rng := passportgen.NewRand(4)
	type input struct {
		kind  string
		key   []byte
		value []byte
		valid bool
	}
	inputs := make([]input, n)
	kinds := map[string]int{}
	expectValid := 0
	for i := range inputs {
		var in input
		if rng.Float64() < 0.3 {
			r := passportgen.Valid(rng)
			in = input{kind: "valid", key: r.Key, value: r.Value}
		} else {
			in.kind, in.value = passportgen.HostileCase(rng)
			if rng.IntN(2) == 0 {
				in.key = fmt.Appendf(nil, "k%d", i)
			}
		}
		_, err := passport.Parse(in.value, passport.DefaultLimits())
		in.valid = err == nil && in.value != nil
		if in.valid {
			expectValid++
		}
		kinds[in.kind]++
		inputs[i] = in
	}

	// Batches up to 8 MiB, as the topic allows: oversized values (over the
	// contract's 1 MiB) must reach the topic for the ingestor to reject them.
	p := NewProducer(t, s.bootstrap, s.topics.Input, kgo.ProducerBatchMaxBytes(8<<20))
	for i, in := range inputs {
		p.Send(i, in.key, in.value)
	}
	landedRecs := p.Wait(2 * time.Minute)

	if ok, desc := s.waitCommittedToEnd(3 * time.Minute); !ok {
		t.Errorf("ingestor did not commit to the end of every partition: %s", desc)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	accepted := map[[2]int64]int{}
	rows, err := s.pool.Query(ctx, `select source_partition, source_offset from route_passports`)
	if err != nil {
		t.Fatalf("query: %v", err)
	}
	for rows.Next() {
		var part int32
		var off int64
		if err := rows.Scan(&part, &off); err != nil {
			t.Fatalf("scan: %v", err)
		}
		accepted[[2]int64{int64(part), off}]++
	}
	rows.Close()
	dlq, cats := s.dlqOrigins()
	dlqTotal := 0
	for _, c := range dlq {
		dlqTotal += c
	}

	// Every produced record is exactly one of: a row, a DLQ record.
	var missing, both, wrongClass []string
	for _, l := range landedRecs {
		k := [2]int64{int64(l.Partition), l.Offset}
		a, d := accepted[k], dlq[k]
		in := inputs[l.Index]
		switch {
		case a+d == 0:
			missing = append(missing, fmt.Sprintf("%d/%d (%s)", l.Partition, l.Offset, in.kind))
		case a+d > 1:
			both = append(both, fmt.Sprintf("%d/%d (%s, row %d dlq %d)", l.Partition, l.Offset, in.kind, a, d))
		case (a == 1) != in.valid:
			wrongClass = append(wrongClass, fmt.Sprintf("%d/%d (%s, accepted=%v, passport.Parse valid=%v)", l.Partition, l.Offset, in.kind, a == 1, in.valid))
		}
	}
	healthz := s.ingestor.Healthz()
	sameProcess := s.ingestor.PID() == pid && s.ingestor.Running() && s.ingestor.Unexpected() == 0
	if ok, desc := s.waitPublished(2*len(accepted), 2*time.Minute); !ok {
		t.Errorf("outbox not fully published: %s", desc)
	}
	var kindList []string
	for _, k := range slices.Sorted(maps.Keys(kinds)) {
		kindList = append(kindList, fmt.Sprintf("%s:%d", k, kinds[k]))
	}
	var catList []string
	for _, k := range slices.Sorted(maps.Keys(cats)) {
		catList = append(catList, fmt.Sprintf("%s:%d", k, cats[k]))
	}
	report(t, "hostile-input",
		fmt.Sprintf("produced=%d accepted=%d dead-lettered=%d expected-valid=%d", len(landedRecs), len(accepted), dlqTotal, expectValid),
		fmt.Sprintf("same-pid=%v healthz=%d", sameProcess, healthz),
		"dlq-categories="+strings.Join(catList, ","),
		"kinds="+strings.Join(kindList, ","),
		fmt.Sprintf("elapsed=%s", time.Since(start).Round(time.Second)))

	if !sameProcess {
		t.Errorf("the ingestor did not stay up: pid %d → %d, running %v, unexpected exits %d", pid, s.ingestor.PID(), s.ingestor.Running(), s.ingestor.Unexpected())
	}
	if healthz != 200 {
		t.Errorf("/healthz = %d, want 200", healthz)
	}
	if len(accepted)+dlqTotal != len(landedRecs) {
		t.Errorf("accepted %d + dead-lettered %d = %d, want produced %d", len(accepted), dlqTotal, len(accepted)+dlqTotal, len(landedRecs))
	}
	for what, list := range map[string][]string{"neither accepted nor dead-lettered": missing, "both or twice": both, "classified differently from passport.Parse": wrongClass} {
		if len(list) > 0 {
			sort.Strings(list)
			t.Errorf("%d records %s: %s", len(list), what, strings.Join(list[:min(len(list), 10)], "; "))
		}
	}
}

// testIngestorTakeover: of two ingestors in one group (default consumer
// settings, no static membership), one is killed with SIGKILL, so it cannot
// leave the group; the other must take its partitions once the dead member's
// session expires and commit the input to its end. How long that takes is
// the default session.timeout.ms (pkg/kafkax: 10 s; librdkafka's own is 45 s):
// every crashed pod (OOM kill, lost node) stalls its partitions that long.
func testIngestorTakeover(t *testing.T, bins Binaries) {
	const n = 1_200
	s := newStack(t, bins, "takeover", stackOptions{})
	second := s.ingestor.Twin("ingestor-2")
	s.ingestor.Start()
	second.Start()
	s.relay.Start()
	for _, pr := range []*Proc{s.ingestor, second, s.relay} {
		pr.WaitReady(90 * time.Second)
	}
	if ok, desc := waitFor(time.Minute, 500*time.Millisecond, s.groupSplit); !ok {
		t.Fatalf("the group did not give both ingestors partitions: %s", desc)
	}
	recs := GenValid(5, n)
	p := NewProducer(t, s.bootstrap, s.topics.Input)

	// Both members own partitions: each wrote some of the first half.
	p.Stream(context.Background(), recs[:n/2], 300, nil)
	p.Wait(time.Minute)
	if ok, desc := s.waitCommittedToEnd(time.Minute); !ok {
		t.Fatalf("first half not committed by the two ingestors: %s", desc)
	}
	for _, pr := range []*Proc{s.ingestor, second} {
		if v, _ := pr.Metric("route_passport_ingest_success_total"); v == 0 {
			t.Fatalf("%s wrote nothing of the first half: the group did not split the partitions between the two", pr.name)
		}
	}

	s.ingestor.Kill9()
	killed := time.Now()
	p.Stream(context.Background(), recs[n/2:], 300, nil)
	p.Wait(time.Minute)
	ok, desc := s.waitCommittedToEnd(2 * time.Minute)
	took := time.Since(killed)
	if !ok {
		t.Fatalf("the surviving ingestor did not commit the input to its end: %s", desc)
	}
	if ok, desc := s.waitPublished(2*n, 2*time.Minute); !ok {
		t.Errorf("outbox not fully published: %s", desc)
	}
	v := s.tally(recs)
	report(t, "ingestor-takeover", v.String(), "committed-to-end-after-kill="+took.Round(100*time.Millisecond).String())
	if v.Lost != 0 || v.DLQ != 0 || v.Failed != 0 {
		t.Errorf("lost=%d dlq=%d failed=%d, want 0", v.Lost, v.DLQ, v.Failed)
	}
	// The second half streams for 2 s; its last records wait for the
	// takeover, which comes one session timeout (10 s) after the kill, plus
	// two cooperative rebalance rounds and the batches (13 s alone): 25 s
	// leaves room for a loaded machine; librdkafka's 45 s (46 s) does not fit.
	if took > 25*time.Second {
		t.Errorf("the killed ingestor's partitions were committed to their end %s after the kill, want within 25 s (session.timeout.ms)", took.Round(100*time.Millisecond))
	}
}

// groupSplit reports whether the ingestors' group is stable with two
// members, each assigned partitions of the input topic.
func (s *stack) groupSplit() (bool, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	groups, err := s.adm.DescribeGroups(ctx, s.group)
	if err != nil {
		return false, err.Error()
	}
	g, ok := groups[s.group]
	if !ok || g.Err != nil {
		return false, fmt.Sprintf("group %s: %v", s.group, g.Err)
	}
	owned := map[string][]int32{}
	for _, m := range g.Members {
		if a, ok := m.Assigned.AsConsumer(); ok {
			for _, tp := range a.Topics {
				if tp.Topic == s.topics.Input {
					owned[m.MemberID] = append(owned[m.MemberID], tp.Partitions...)
				}
			}
		}
	}
	desc := fmt.Sprintf("state %s, %d members, partitions by member %v", g.State, len(g.Members), owned)
	if g.State != "Stable" || len(g.Members) != 2 {
		return false, desc
	}
	for _, m := range g.Members {
		if len(owned[m.MemberID]) == 0 {
			return false, desc
		}
	}
	return true, desc
}

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/pcp/route-processing/pkg/passportgen"
)

// The end of every streaming scenario of TestProduction and
// TestResilience: stream, wait for the end state, tally, check.

// streamAsync streams recs at rate per second in the background; the
// returned channel closes when the last record was handed to the client.
func streamAsync(p *Producer, recs []passportgen.Record, rate int) <-chan struct{} {
	done := make(chan struct{})
	go func() { defer close(done); p.Stream(context.Background(), recs, rate, nil) }()
	return done
}

// converge waits for the end state every scenario wants: input committed to
// the end, want outbox rows all PUBLISHED.
func converge(t *testing.T, s *stack, want int, timeout time.Duration) {
	t.Helper()
	if ok, desc := s.waitCommittedToEnd(timeout); !ok {
		t.Errorf("ingestor did not commit to the end of the input: %s", desc)
	}
	if ok, desc := s.waitPublished(want, timeout); !ok {
		t.Errorf("outbox not fully published: %s", desc)
	}
}

// finish is the end of a scenario that streams recs through p: the stream
// handed to the client (streamed closed) and acknowledged, the end state
// reached (converge), the monitor stopped (m may be nil) and the tally.
// bound caps each wait.
func finish(t *testing.T, s *stack, p *Producer, streamed <-chan struct{}, recs []passportgen.Record, m *monitor, bound time.Duration) verdict {
	t.Helper()
	<-streamed
	p.Wait(bound)
	converge(t, s, 2*len(recs), bound)
	if m != nil {
		m.halt()
	}
	return s.tally(recs)
}

// checkClean fails t unless v is lost 0, dlq 0 (or wantDLQ), failed 0 and
// every outbox row published.
func checkClean(t *testing.T, v verdict, wantPublished, wantDLQ int) {
	t.Helper()
	for _, d := range v.Details {
		t.Log(d)
	}
	if v.Lost != 0 || v.DLQ != wantDLQ || v.Failed != 0 || v.Published != wantPublished {
		t.Errorf("want lost=0 dlq=%d failed=0 published=%d; got %s", wantDLQ, wantPublished, v)
	}
}

// exits is the figure of exits the test did not cause.
func exits(s *stack) string {
	return fmt.Sprintf("exits=ingestor:%d,relay:%d", s.ingestor.Unexpected(), s.relay.Unexpected())
}

// checkNoExits: the binaries ride out faults; they never exit.
func checkNoExits(t *testing.T, s *stack) {
	t.Helper()
	if s.ingestor.Unexpected() != 0 || s.relay.Unexpected() != 0 {
		t.Errorf("a process exited (ingestor %d, relay %d); they must keep retrying", s.ingestor.Unexpected(), s.relay.Unexpected())
	}
}

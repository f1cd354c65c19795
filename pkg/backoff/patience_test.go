package backoff

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

func TestPatience(t *testing.T) {
	p := NewPatience(2*time.Second, 5*time.Second)
	if got := p.Wait(); got != 2*time.Second {
		t.Fatalf("before any answer: %s, want the minimum 2s", got)
	}
	p.Answered(time.Millisecond)
	if got := p.Wait(); got != 2*time.Second {
		t.Fatalf("after a fast answer: %s, want 2s", got)
	}
	p.Missed()
	p.Missed()
	if got := p.Wait(); got != 5*time.Second {
		t.Fatalf("after two misses: %s, want 2s doubled twice, capped at 5s", got)
	}
	p.Answered(time.Millisecond)
	if got := p.Wait(); got != 2*time.Second {
		t.Fatalf("an answer ends the misses: %s, want 2s", got)
	}

	slow := NewPatience(time.Second, 10*time.Second)
	slow.Answered(2 * time.Second)
	if got := slow.Wait(); got != 8*time.Second {
		t.Fatalf("a link answering in 2s: %s, want 4 x 2s", got)
	}
	for range 20 {
		slow.Answered(10 * time.Millisecond)
	}
	if got := slow.Wait(); got != time.Second {
		t.Fatalf("after the link got fast again: %s, want the minimum", got)
	}
	for range 100 {
		slow.Missed()
	}
	if got := slow.Wait(); got != 10*time.Second {
		t.Fatalf("many misses: %s, want the maximum", got)
	}
}

func TestPatienceConcurrent(t *testing.T) {
	p := NewPatience(time.Second, 4*time.Second)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for range 1000 {
				if i%2 == 0 {
					p.Answered(time.Duration(i) * time.Millisecond)
				} else {
					p.Missed()
				}
				if w := p.Wait(); w < time.Second || w > 4*time.Second {
					t.Errorf("wait %s outside [1s, 4s]", w)
					return
				}
			}
		})
	}
	wg.Wait()
}

// TestPatienceRun: a probe that runs out of its wait, or gives up by itself
// just before (a Kafka metadata request), is a miss and the next waits
// twice as long; one refused at once is not, nor one whose caller's own
// deadline came first; a success resets the misses and counts its time;
// Forgive clears the misses and keeps the usual answer.
func TestPatienceRun(t *testing.T) {
	p := NewPatience(20*time.Millisecond, time.Second)
	hang := func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }
	refused := errors.New("connection refused")
	wantWait := func(want time.Duration, why string) {
		t.Helper()
		if got := p.Wait(); got.Round(10*time.Millisecond) != want {
			t.Fatalf("%s: wait %s, want %s", why, got, want)
		}
	}

	start := time.Now()
	err := p.Run(context.Background(), hang)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("hung probe: %v, want its deadline", err)
	}
	var miss *MissError
	if !errors.As(err, &miss) || miss.Wait != 20*time.Millisecond {
		t.Fatalf("hung probe: %v, want a MissError naming the 20ms it waited", err)
	}
	if took := time.Since(start); took < 20*time.Millisecond {
		t.Fatalf("hung probe cut after %s, before its wait of 20ms", took)
	}
	wantWait(40*time.Millisecond, "a miss doubles the wait")

	if err := p.Run(context.Background(), func(context.Context) error { return refused }); err != refused {
		t.Fatalf("refused probe: %v", err)
	}
	wantWait(40*time.Millisecond, "an error before the wait ran out is no miss")

	callerDeadline, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
	_ = p.Run(callerDeadline, hang)
	cancel()
	wantWait(40*time.Millisecond, "a probe its caller's deadline cut is no miss")

	p.Forgive()
	wantWait(20*time.Millisecond, "Forgive clears the misses")
	p.Missed()

	var given time.Duration
	if err := p.Run(context.Background(), func(ctx context.Context) error {
		d, _ := ctx.Deadline()
		given = time.Until(d)
		time.Sleep(30 * time.Millisecond)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if given < 35*time.Millisecond || given > 40*time.Millisecond {
		t.Fatalf("the probe after a miss had %s, want the doubled 40ms", given)
	}
	// Four times the usual answer (30 ms and what a loaded machine adds).
	answered := p.Wait()
	if answered < 120*time.Millisecond || answered > 400*time.Millisecond {
		t.Fatalf("after an answer in 30ms: wait %s, want four times it (no misses left)", answered)
	}
	p.Missed()
	p.Forgive()
	if got := p.Wait(); got != answered {
		t.Fatalf("Forgive after a miss: wait %s, want the usual answer's %s kept", got, answered)
	}
}

// TestPatienceRunSelfBounded: a probe bounded by itself (a Kafka metadata
// request: whole milliseconds, no later than the deadline) that gives up
// just before its wait ends is a miss, whether or not its caller is still
// there.
func TestPatienceRunSelfBounded(t *testing.T) {
	p := NewPatience(200*time.Millisecond, time.Second)
	timedOut := errors.New("Local: Timed out")
	if err := p.Run(context.Background(), func(ctx context.Context) error {
		d, _ := ctx.Deadline()
		time.Sleep(time.Until(d) - 5*time.Millisecond)
		return timedOut
	}); !errors.Is(err, timedOut) || !errors.As(err, new(*MissError)) {
		t.Fatalf("self-bounded probe: %v, want its own error as a miss", err)
	}
	if got := p.Wait(); got != 400*time.Millisecond {
		t.Fatalf("after a probe that gave up by itself at the end of its wait: wait %s, want the doubled 400ms", got)
	}

	// A self-bounded probe runs out its wait even when its caller stops
	// caring halfway: the wait it ran out still says the link is slow.
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	if err := p.Run(ctx, func(ctx context.Context) error {
		d, _ := ctx.Deadline()
		time.Sleep(time.Until(d))
		return timedOut
	}); !errors.As(err, new(*MissError)) {
		t.Fatalf("self-bounded probe whose caller was cancelled halfway: %v, want a miss", err)
	}
	if got := p.Wait(); got != 800*time.Millisecond {
		t.Fatalf("after a probe that ran out its wait while its caller left: wait %s, want the doubled 800ms", got)
	}
}

// TestPatienceWorked: a call that worked clears the misses and brings a
// usual answer learned from a slow probe down to twice its own time, never
// up; with no answer yet the usual one stays unknown.
func TestPatienceWorked(t *testing.T) {
	p := NewPatience(2*time.Second, 5*time.Second)
	p.Worked(time.Second)
	if got := p.Wait(); got != 2*time.Second {
		t.Fatalf("Worked before any answer: wait %s, want the minimum (no usual answer made up)", got)
	}
	p.Answered(4 * time.Second) // a probe that waited through an outage
	p.Missed()
	if got := p.Wait(); got != 5*time.Second {
		t.Fatalf("after a 4-s answer and a miss: wait %s, want the cap", got)
	}
	p.Worked(10 * time.Millisecond)
	if got := p.Wait(); got != 2*time.Second {
		t.Fatalf("after a call that worked in 10ms: wait %s, want the minimum", got)
	}
	p.Answered(time.Second) // usual: 20ms + (1s-20ms)/4 = 265ms
	before := p.Wait()
	p.Worked(time.Second)
	if got := p.Wait(); got != before {
		t.Fatalf("a slower call raised the wait: %s, was %s", got, before)
	}

	// A link 700 ms slow per reply: a probe (two round trips) answers in
	// 1.4 s, a warm call (one) works in 0.7 s and must not cut the wait.
	slow := NewPatience(2*time.Second, 5*time.Second)
	slow.Answered(1400 * time.Millisecond)
	slow.Worked(700 * time.Millisecond)
	if got := slow.Wait(); got != 5*time.Second {
		t.Fatalf("on a slow link a call of one round trip cut the probes' wait to %s, want 5s (4 × 1.4 s, capped)", got)
	}
}

// Package shutdown holds the contract's bound on a graceful stop (§5: within
// 30 s of SIGTERM or SIGINT) and the clock that divides it between the steps
// of a stop. Each step keeps a bound of its own (what it needs when things
// go well); the clock cuts that bound to what is left of the whole, so that
// steps that each time out in turn (a hung database, a frozen broker) still
// end inside it.
package shutdown

import (
	"context"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"
)

// Limit is the contract's bound from the signal to the process's exit.
const Limit = 30 * time.Second

// OnSignal returns a context that ends at the first SIGINT or SIGTERM, the
// start of a graceful stop. A second signal more than repeatWindow after the
// first ends the process at once, with status 128 + the signal's number (130
// for SIGINT, 143 for SIGTERM), as a shell reports a process its signal
// killed: an operator's second Ctrl-C on a stop that waits for a hung
// database or broker. The exit is explicit because the runtime's own answer,
// re-raising the signal, does nothing to a container's PID 1 (the kernel
// drops it), and Go then exits with 2, this service's status for a
// configuration error. A repeat within repeatWindow is the same request
// delivered twice (a supervisor such as coreutils' timeout signals the
// process and its process group) and is dropped: before, it killed the
// process in the middle of its stop. stop releases the signals when no
// signal came.
func OnSignal() (ctx context.Context, stop context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		select {
		case <-sigs:
		case <-ctx.Done():
			signal.Stop(sigs)
			return
		}
		first := time.Now()
		cancel()
		for sig := range sigs {
			if time.Since(first) <= repeatWindow {
				continue
			}
			num, _ := sig.(syscall.Signal)
			os.Exit(128 + int(num))
		}
	}()
	return ctx, cancel
}

// repeatWindow is how soon after the first signal a second one counts as a
// repeat of it.
const repeatWindow = time.Second

// budget is what the steps may use: Limit less a margin for what follows
// the last step (deferred closes of things that do not block, the exit).
const budget = Limit - 2*time.Second

// Clock measures the time since the stop began.
type Clock struct {
	began atomic.Int64 // UnixNano when ctx ended; 0 before
	now   func() time.Time
}

// Start returns a clock that starts when ctx ends (the signal). Steps run
// before that (an exit on a fatal error) get their own bounds in full.
func Start(ctx context.Context) *Clock {
	return startAt(ctx, time.Now)
}

func startAt(ctx context.Context, now func() time.Time) *Clock {
	c := &Clock{now: now}
	context.AfterFunc(ctx, func() { c.began.Store(c.now().UnixNano()) })
	return c
}

// Left returns step's bound cut to what is left of the stop's budget
// (never negative: a step with nothing left gets 0, i.e. no wait).
func (c *Clock) Left(step time.Duration) time.Duration {
	began := c.began.Load()
	if began == 0 {
		return step
	}
	left := budget - c.now().Sub(time.Unix(0, began))
	return max(0, min(step, left))
}

package main

import (
	"fmt"
	"time"
)

// slowWindowMs is the p99 above which a window counts as slow: about four
// times the bench's p99 at 1,000 passports/s (21–30 ms).
const slowWindowMs = 100

// checkpointEnded says whether a checkpoint ended in the window: its phases'
// times are added when it ends (a checkpoint with nothing to write has
// neither, and is not counted).
func (s sample) checkpointEnded() bool { return s.CheckpointWriteMs > 0 || s.CheckpointSyncMs > 0 }

// brokerStallMs is the acknowledgement of a broker probe record above which
// the broker counts as paused: about fifteen times the probe's p99 in the
// soaks at 1,000 passports/s (3–4 ms).
const brokerStallMs = 50

// brokerStalled says whether the broker paused in the window.
func (s sample) brokerStalled() bool { return s.BrokerAckMs > brokerStallMs }

// slowCounts are the windows outside the hold with outputs, the slow ones
// among them, and how many of each had a checkpoint end (ckpt, slowCkpt),
// the broker pause (stall, slowStall) or the ingestor commit slowly
// (slowCommit) in them or in the window before: a stall shows in the
// latency of the outputs that arrive after it.
type slowCounts struct {
	windows, ckpt, stall, slow, slowCkpt, slowStall, slowCommit int
}

func countSlow(ss []sample) slowCounts {
	var c slowCounts
	near := func(i int, f func(sample) bool) bool {
		return f(ss[i]) || i > 0 && f(ss[i-1])
	}
	checkpointed := sample.checkpointEnded
	slowCommits := func(s sample) bool { return s.SlowCommits > 0 }
	for i, s := range ss {
		if s.Hold || s.Outputs == 0 {
			continue
		}
		c.windows++
		ckpt, stall := near(i, checkpointed), near(i, sample.brokerStalled)
		if ckpt {
			c.ckpt++
		}
		if stall {
			c.stall++
		}
		if s.P99 <= slowWindowMs {
			continue
		}
		c.slow++
		if ckpt {
			c.slowCkpt++
		}
		if stall {
			c.slowStall++
		}
		if near(i, slowCommits) {
			c.slowCommit++
		}
	}
	return c
}

// slowWindowsText says what the slow windows stood on, against how often a
// checkpoint ends in any window. At the default 10-s step most windows
// hold a checkpoint's end; SOAK_SAMPLE=1s tells them apart.
func slowWindowsText(r *run) string {
	c := countSlow(r.samples)
	if c.windows == 0 {
		return "No window outside the hold had outputs."
	}
	share := func(n int) float64 { return 100 * float64(n) / float64(c.windows) }
	return fmt.Sprintf("Windows of %s outside the hold with p99 over %d ms: %d of %d. A checkpoint ended in %d of them or in the window before (in %d of all %d windows, %.0f %%); the broker held a probe record over %d ms in %d of them or in the window before (in %d of all windows, %.0f %%); the ingestor had commits over 100 ms in %d of them or in the window before.",
		r.cfg.sampleStep.Round(time.Second), slowWindowMs, c.slow, c.windows, c.slowCkpt, c.ckpt, c.windows, share(c.ckpt),
		brokerStallMs, c.slowStall, c.stall, share(c.stall), c.slowCommit)
}

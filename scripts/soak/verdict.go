package main

import (
	"fmt"
	"math"
	"time"
)

// target is one of issue 12's item-4 targets, judged on a run.
type target struct {
	name   string
	pass   bool
	judged bool // false: the run cannot say (too short, no hold)
	detail string
}

func (x target) verdict() string {
	switch {
	case !x.judged:
		return "N/A"
	case x.pass:
		return "PASS"
	default:
		return "FAIL"
	}
}

// phases are the time ranges the targets compare, clipped to the run: the
// issue's ranges for a 30-minute run with a centred 5-minute hold, scaled
// down for the short runs used while tuning.
type phases struct {
	baseFrom, baseTo time.Duration // "minutes 2–5", before the hold
	tailFrom, end    time.Duration // "the last 5 minutes", after the hold
	sizeRef          time.Duration // after the first full retention cycle
	holdFrom, holdTo time.Duration
	settle           time.Duration // after the hold: from here on size must not grow
}

func phasesOf(r *run) phases {
	c := r.cfg
	p := phases{baseFrom: 2 * time.Minute, baseTo: 5 * time.Minute, end: c.duration}
	p.holdFrom, p.holdTo = c.duration, c.duration
	if c.hold > 0 {
		p.holdFrom, p.holdTo = c.holdStart, c.holdStart+c.hold
	}
	if p.baseTo > p.holdFrom {
		p.baseTo = p.holdFrom
	}
	if p.baseFrom >= p.baseTo {
		p.baseFrom = p.baseTo / 3
	}
	p.tailFrom = max(c.duration-5*time.Minute, p.holdTo+(c.duration-p.holdTo)/2)
	// The sweep runs every OUTBOX_RETENTION_INTERVAL (10 s by default) and
	// deletes what is past retention, so a row lives a little past it;
	// retention + 2 minutes leaves room, and the next sample is the reference.
	p.sizeRef = c.retention + 2*time.Minute
	p.settle = p.holdTo + min(5*time.Minute, (c.duration-p.holdTo)/2)
	return p
}

// merged is the latency histogram of the windows ending in (from, to].
func merged(r *run, from, to time.Duration) *hist {
	h := newHist()
	for i, s := range r.samples {
		if s.T > from && s.T <= to {
			h.merge(r.load.window(i))
		}
	}
	return h
}

// sampleAt is the first sample at or after t whose database readings
// succeeded.
func sampleAt(r *run, t time.Duration) (sample, bool) {
	for _, s := range r.samples {
		if s.T >= t && s.DBRead {
			return s, true
		}
	}
	return sample{}, false
}

// lastRead is the last sample whose database readings succeeded.
func lastRead(r *run) (sample, bool) {
	for i := len(r.samples) - 1; i >= 0; i-- {
		if r.samples[i].DBRead {
			return r.samples[i], true
		}
	}
	return sample{}, false
}

func judge(r *run) []target {
	p := phasesOf(r)
	var out []target
	c := r.cfg

	lost := target{name: "nothing lost", judged: true}
	failed, pending := r.status["FAILED"], r.status["PENDING"]
	lost.pass = r.missingO == 0 && failed == 0 && pending == 0 && r.load.produceErrs.Load() == 0
	lost.detail = fmt.Sprintf("%d passports produced, %d outputs received, %d outputs missing (%d passports), %d duplicates; at the end PENDING %d, FAILED %d, PUBLISHED %d; the outputs %s %s after the input stopped",
		r.load.produced.Load(), r.load.outputs.Load(), r.missingO, r.missingP, r.load.duplicates.Load(), pending, failed, r.status["PUBLISHED"],
		map[bool]string{true: "all arrived", false: "stopped arriving"}[r.drained], r.drain.Round(time.Second))
	out = append(out, lost)

	base := merged(r, p.baseFrom, p.baseTo).quantile(0.99)
	tail := merged(r, p.tailFrom, p.end).quantile(0.99)
	lat := target{name: "p99 of the last minutes ≤ 1.5 × p99 of minutes 2–5", judged: !math.IsNaN(base) && !math.IsNaN(tail)}
	lat.pass = tail <= 1.5*base
	lat.detail = fmt.Sprintf("p99 %s–%s: %.1f ms; p99 %s–%s: %.1f ms (%.2f×)", mmss(p.baseFrom), mmss(p.baseTo), base, mmss(p.tailFrom), mmss(p.end), tail, tail/base)
	out = append(out, lat)

	size := target{name: "outbox size plateaus (last ≤ 1.3 × after the first retention cycle)"}
	last, haveLast := lastRead(r)
	if ref, ok := sampleAt(r, p.sizeRef); ok && haveLast && p.sizeRef < p.holdFrom {
		size.judged = true
		size.pass = float64(last.Total()) <= 1.3*float64(ref.Total())
		size.detail = fmt.Sprintf("%s at %s, %s at the end (%.2f×)", mb(ref.Total()), mmss(ref.T), mb(last.Total()), float64(last.Total())/float64(ref.Total()))
	} else {
		size.detail = fmt.Sprintf("no sample after the first retention cycle (%s) before the hold", mmss(p.sizeRef))
	}
	out = append(out, size)

	limit := int64(10 * 2 * c.rate) // 10 s of events
	out = append(out, boundedTarget(r.samples, limit))

	grow := target{name: "after the hold, size growth stops (largest of the second half after settling ≤ 1.05 × of the first)"}
	rec := target{name: "after the hold, p99 back to baseline (≤ 1.5 × minutes 2–5) within 5 minutes"}
	if c.hold > 0 && len(r.samples) > 0 {
		first, second, ok := halfPeaks(r.samples, p.settle, p.end)
		if ok {
			// Peak against peak: the size is a saw-tooth (each retention
			// sweep frees a cycle's rows, new rows fill the space), and a
			// trough compared with a later peak measures its height, not
			// growth.
			grow.judged = true
			grow.pass = float64(second) <= 1.05*float64(first)
			mid := p.settle + (p.end-p.settle)/2
			grow.detail = fmt.Sprintf("largest sample %s–%s: %s; %s–%s: %s (%.2f×)", mmss(p.settle), mmss(mid), mb(first), mmss(mid), mmss(p.end), mb(second), float64(second)/float64(first))
			if s, ok := sampleAt(r, p.settle); ok {
				grow.detail += fmt.Sprintf("; %s at %s", mb(s.Total()), mmss(s.T))
			}
		}
		back := time.Duration(-1)
		for t := p.holdTo; t+time.Minute <= p.end; t += c.sampleStep {
			if q := merged(r, t, t+time.Minute).quantile(0.99); q <= 1.5*base {
				back = t + time.Minute - p.holdTo
				break
			}
		}
		rec.judged = !math.IsNaN(base)
		rec.pass = back >= 0 && back <= 5*time.Minute
		if back >= 0 {
			rec.detail = fmt.Sprintf("the first minute with p99 ≤ %.1f ms ends %s after the release", 1.5*base, back)
		} else {
			rec.detail = fmt.Sprintf("no minute after the release had p99 ≤ %.1f ms", 1.5*base)
		}
	}
	out = append(out, grow, rec)
	return out
}

// boundedTarget judges pending and the oldest pending age against limit
// rows and 10 s over every sample, the held ones included. A sample whose
// pending figures could not be read fails it.
func boundedTarget(samples []sample, limit int64) target {
	var worstP, worstPH int64
	var worstA, worstAH float64
	unread := 0
	fromRelay := 0
	for _, s := range samples {
		if !s.PendingRead() {
			unread++
			continue
		}
		if s.PendingFrom == "relay" {
			fromRelay++
		}
		worstP, worstA = max(worstP, s.Pending), max(worstA, s.OldestPending)
		if s.Hold {
			worstPH, worstAH = max(worstPH, s.Pending), max(worstAH, s.OldestPending)
		}
	}
	bounded := target{name: "pending < 10 s of events and oldest < 10 s, also during the hold", judged: true}
	bounded.pass = worstP < limit && worstA < 10
	bounded.detail = fmt.Sprintf("worst pending %d (limit %d), oldest %.1f s; during the hold %d, %.1f s", worstP, limit, worstA, worstPH, worstAH)
	if fromRelay > 0 {
		bounded.detail += fmt.Sprintf("; %d samples from the relay's gauges (the count timed out)", fromRelay)
	}
	if unread > 0 {
		// A reading that failed is most likely one that waited on a busy
		// database: say so rather than judge without it.
		bounded.pass = false
		bounded.detail += fmt.Sprintf("; %d samples could not be read", unread)
	}
	return bounded
}

// halfPeaks returns the largest outbox size read in the first and in the
// second half of (from, end]; ok is false when a half has no reading.
func halfPeaks(samples []sample, from, end time.Duration) (first, second int64, ok bool) {
	mid := from + (end-from)/2
	for _, s := range samples {
		switch {
		case !s.DBRead || s.T <= from || s.T > end:
		case s.T <= mid:
			first = max(first, s.Total())
		default:
			second = max(second, s.Total())
		}
	}
	return first, second, first > 0 && second > 0
}

func mmss(d time.Duration) string {
	d = d.Round(time.Second)
	return fmt.Sprintf("%d:%02d", int(d.Minutes()), int(d.Seconds())%60)
}

func mb(b int64) string { return fmt.Sprintf("%.0f MB", float64(b)/1e6) }

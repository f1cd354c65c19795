package main

import (
	"context"
	"fmt"
	"time"

	"github.com/pcp/route-processing/pkg/e2e"
)

type ingestResults struct {
	def, one []float64 // passports/s per run
	ratios   []float64
	// ofCeiling is each default run's rate ÷ the ceiling run timed right
	// after it, when the ceiling runs paired with the ingest (paired).
	ofCeiling []float64
	toEnd     []time.Duration // default: process start → committed at the end
	partial   []string
	dbs       []string // databases filled by the default runs (all outbox rows PENDING)
	obsDef    []observation
	obsOne    []observation
	errs      []string
	firstWait []time.Duration
}

// ingestPhase times the ingestor's default and per-message runs
// (config.ingestRuns of each, as the time allows); with
// withCeiling, each default run is followed at once by a run of the
// DB-only ceiling. This host's speed drifts by a fifth from one minute to
// the next, and a ceiling timed a minute after the service's runs
// carried that drift into their ratio; a ceiling run right after each
// service run shares its minute.
func (b *bench) ingestPhase(deadline time.Time, withCeiling bool) (ingestResults, ingestCeilingResults) {
	var r ingestResults
	rc := ingestCeilingResults{n: b.cfg.ingestN}
	var ceil *ingestCeiling
	if withCeiling {
		ceil = b.newIngestCeiling()
	}
	runs := b.cfg.ingestRuns
	for run := 0; run < runs; run++ {
		if run > 0 && !fits(deadline, r.obsDef, r.obsOne, rc.obs) {
			break
		}
		say("bench: ingest run %d/%d: default INGEST_BATCH_SIZE ...", run+1, runs)
		d, err := b.ingestRun("default", "", run, 0)
		if err != nil {
			r.errs = append(r.errs, err.Error())
			break
		}
		say("bench:   default: %.0f passports/s (%s to the end)", d.rate, d.toEnd.Round(time.Millisecond))
		// The relay's phases copy as many databases as they have runs.
		keep := len(r.dbs) < b.cfg.runs
		if keep {
			b.vacuumKept(d.db)
		} else {
			b.dropDB(d.db)
		}
		if ceil != nil {
			if ceil.run(b, run, runs, &rc) != nil {
				break
			}
			r.ofCeiling = append(r.ofCeiling, d.rate/rc.rates[len(rc.rates)-1])
		}
		say("bench: ingest run %d/%d: INGEST_BATCH_SIZE=1 ...", run+1, runs)
		o, err := b.ingestRun("one", "1", run, b.cfg.perMessageCap)
		if err != nil {
			r.errs = append(r.errs, err.Error())
			break
		}
		say("bench:   INGEST_BATCH_SIZE=1: %.0f passports/s%s", o.rate, o.partialNote)
		b.dropDB(o.db)
		r.def, r.one = append(r.def, d.rate), append(r.one, o.rate)
		r.ratios = append(r.ratios, d.rate/o.rate)
		r.toEnd = append(r.toEnd, d.toEnd)
		r.firstWait = append(r.firstWait, d.firstCommit)
		if keep {
			r.dbs = append(r.dbs, d.db)
		}
		r.obsDef, r.obsOne = append(r.obsDef, d.obs), append(r.obsOne, o.obs)
		if o.partialNote != "" {
			r.partial = append(r.partial, o.partialNote)
		}
	}
	return r, rc
}

// paired reports whether the ceiling's runs were each timed right after
// a default run, so that def[i] and the ceiling's rates[i] share the
// host's minute.
func (r ingestResults) paired() bool { return len(r.ofCeiling) > 0 }

type ingestRun struct {
	rate        float64
	toEnd       time.Duration
	firstCommit time.Duration
	db          string
	obs         observation
	partialNote string
}

// ingestRun consumes the pre-filled topic with a new group into a fresh
// database. The rate is taken from the first commit to the last, so that
// process start and the group join (a second or two, the same for both
// settings) do not dilute it; cap > 0 ends a slow run early and takes the
// rate over what was committed by then.
func (b *bench) ingestRun(label, batch string, run int, capAfterFirst time.Duration) (ingestRun, error) {
	t := b.t
	db := fmt.Sprintf("ingest_%s_%d", label, run)
	url := b.createServiceDB(db)
	group := fmt.Sprintf("bench-%s-%d-%d", label, run, time.Now().UnixNano())
	env := b.serviceEnv(url, topicInput, topicOut1, topicOut2)
	env = append(env, "KAFKA_CONSUMER_GROUP="+group)
	if batch != "" {
		env = append(env, "INGEST_BATCH_SIZE="+batch)
	}
	proc := e2e.NewProc(t, fmt.Sprintf("ingestor-%s-%d", label, run), b.bins.Ingestor, env)
	proc.Start()
	defer proc.Stop()
	t0 := time.Now()
	s := b.startSampler(db, map[string]*e2e.Proc{"ingestor": proc})

	var res ingestRun
	res.db = db
	var t1 time.Time
	var c1, c int64
	for {
		time.Sleep(50 * time.Millisecond)
		c = b.committed(group, topicInput)
		now := time.Now()
		if c > 0 && t1.IsZero() {
			t1, c1 = now, c
			res.firstCommit = now.Sub(t0)
		}
		if c >= int64(b.cfg.ingestN) {
			res.toEnd = now.Sub(t0)
			break
		}
		if !proc.Running() {
			res.obs = s.stop()
			return res, fmt.Errorf("ingest %s run %d: the ingestor exited; log tail:\n%s", label, run, proc.LogTail(20))
		}
		if t1.IsZero() && now.Sub(t0) > 2*time.Minute {
			res.obs = s.stop()
			return res, fmt.Errorf("ingest %s run %d: nothing committed in 2 minutes; log tail:\n%s", label, run, proc.LogTail(20))
		}
		if !t1.IsZero() && capAfterFirst > 0 && now.Sub(t1) > capAfterFirst {
			res.partialNote = fmt.Sprintf(" (stopped after %s at %d of %d)", capAfterFirst, c, b.cfg.ingestN)
			break
		}
	}
	res.obs = s.stop()
	if el := time.Since(t1).Seconds(); el > 0 && c > c1 {
		res.rate = float64(c-c1) / el
	}
	return res, nil
}

// committed is the sum of group's committed offsets on topic.
func (b *bench) committed(group, topic string) int64 {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resps, err := b.adm.FetchOffsets(ctx, group)
	if err != nil {
		return 0
	}
	var sum int64
	for _, o := range resps[topic] {
		if o.At > 0 {
			sum += o.At
		}
	}
	return sum
}

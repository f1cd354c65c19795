package main

import (
	"fmt"
	"time"

	"github.com/pcp/route-processing/pkg/e2e"
)

type relayResults struct {
	seed, def []float64 // events/s
	ratios    []float64
	rows      int
	obsSeed   []observation
	obsDef    []observation
	errs      []string
}

func (b *bench) relayPhase(srcs []string, deadline time.Time) relayResults {
	var r relayResults
	if len(srcs) == 0 {
		r.errs = append(r.errs, "no database from the ingest phase to copy")
		return r
	}
	seedEnv := []string{"OUTBOX_BATCH_SIZE=50", "OUTBOX_POLL_INTERVAL=1s"}
	for run := 0; run < b.cfg.runs; run++ {
		if run > 0 && !fits(deadline, r.obsSeed, r.obsDef) {
			break
		}
		src := srcs[run%len(srcs)]
		say("bench: relay run %d/%d: seed settings (OUTBOX_BATCH_SIZE=50, OUTBOX_POLL_INTERVAL=1s) ...", run+1, b.cfg.runs)
		s, err := b.relayRun("seed", src, run, seedEnv)
		if err != nil {
			r.errs = append(r.errs, err.Error())
			break
		}
		say("bench:   seed: %.0f events/s", s.rate)
		say("bench: relay run %d/%d: defaults ...", run+1, b.cfg.runs)
		d, err := b.relayRun("default", src, run, nil)
		if err != nil {
			r.errs = append(r.errs, err.Error())
			break
		}
		say("bench:   default: %.0f events/s", d.rate)
		r.seed, r.def = append(r.seed, s.rate), append(r.def, d.rate)
		r.ratios = append(r.ratios, d.rate/s.rate)
		r.rows = d.rows
		r.obsSeed, r.obsDef = append(r.obsSeed, s.obs), append(r.obsDef, d.obs)
	}
	return r
}

type relayRun struct {
	rate  float64
	rows  int
	total time.Duration // process start → all PUBLISHED
	obs   observation
}

// relayRun copies src (a database the ingestor filled; every outbox row
// PENDING) and publishes it. The rate runs from the first published row to
// the last, read from the relay's own counter.
func (b *bench) relayRun(label, src string, run int, extraEnv []string) (relayRun, error) {
	t := b.t
	db := fmt.Sprintf("relay_%s_%d_%d", label, run, time.Now().UnixNano()%1_000_000)
	b.cloneDB(src, db)
	defer b.dropDB(db)
	defer b.resetOutputs()
	url := b.pg.URL(db)
	var res relayRun
	if err := b.scalar(url, `select count(*) from route_passport_outbox where status = 'PENDING'`, &res.rows); err != nil {
		return res, err
	}
	env := append(b.serviceEnv(url, topicInput, topicOut1, topicOut2), extraEnv...)
	proc := e2e.NewProc(t, fmt.Sprintf("relay-%s-%d", label, run), b.bins.Relay, env)
	proc.Start()
	defer proc.Stop()
	s := b.startSampler(db, map[string]*e2e.Proc{"relay": proc})
	f, err := followPublished(res.rows, func() (float64, error) {
		pub, _ := proc.Metric("route_passport_outbox_published_total")
		if !proc.Running() {
			return pub, fmt.Errorf("the relay exited; log tail:\n%s", proc.LogTail(20))
		}
		return pub, nil
	})
	res.obs = s.stop()
	if err != nil {
		return res, fmt.Errorf("relay %s run %d: %w", label, run, err)
	}
	res.rate, res.total = f.rate, f.total
	var published int
	if err := b.scalar(url, `select count(*) from route_passport_outbox where status = 'PUBLISHED'`, &published); err != nil {
		return res, err
	}
	if published != res.rows {
		b.note("relay %s run %d: the counter reached %0.f but %d of %d rows are PUBLISHED", label, run, f.published, published, res.rows)
	}
	return res, nil
}

// publishedRun is what followPublished saw.
type publishedRun struct {
	rate      float64       // rows/s from the first published row to the last
	total     time.Duration // from the call until every row was published
	published float64       // the counter's last value
}

// followPublished samples count (a relay's published counter) every 50 ms
// until it reaches rows, and fails when count does or after 4 minutes.
func followPublished(rows int, count func() (float64, error)) (publishedRun, error) {
	t0 := time.Now()
	var t1 time.Time
	var p1 float64
	for {
		time.Sleep(50 * time.Millisecond)
		pub, err := count()
		now := time.Now()
		if pub > 0 && t1.IsZero() {
			t1, p1 = now, pub
		}
		if pub >= float64(rows) {
			res := publishedRun{total: now.Sub(t0), published: pub}
			if el := now.Sub(t1).Seconds(); el > 0 {
				res.rate = (pub - p1) / el
			}
			return res, nil
		}
		if err != nil {
			return publishedRun{published: pub}, err
		}
		if now.Sub(t0) > 4*time.Minute {
			return publishedRun{published: pub}, fmt.Errorf("%0.f of %d published after 4 minutes", pub, rows)
		}
	}
}

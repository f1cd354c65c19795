package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/pcp/route-processing/pkg/e2e"
	"github.com/pcp/route-processing/pkg/record"
)

// The relay ceiling: what the relay's producer alone (pkg/kafkax with the
// relay's settings) publishes of the same records to the same broker,
// without PostgreSQL: claims, marks and the wait for each batch's reports
// are what the relay adds. The records are built as the ingestor builds
// the outbox rows (rows.go) from the ingest phase's passports; chunks of
// ceilingRelayChunk records are handed to ProduceBatch by
// ceilingRelayInFlight callers, so that the client's queue never runs dry.

const (
	ceilingRelayChunk    = 5_000
	ceilingRelayInFlight = 4
)

type relayCeilingResults struct {
	rates []float64 // records/s per run
	n     int
	errs  []string
	obs   []observation
}

func (b *bench) relayCeilingPhase(deadline time.Time) relayCeilingResults {
	var r relayCeilingResults
	recs, err := b.ceilingOutputRecords()
	if err != nil {
		r.errs = append(r.errs, err.Error())
		return r
	}
	r.n = len(recs)
	for run := 0; run < b.cfg.runs; run++ {
		if run > 0 && !fits(deadline, r.obs) {
			break
		}
		say("bench: relay ceiling run %d/%d: raw producer with the relay's settings, %d records ...", run+1, b.cfg.runs, len(recs))
		rate, obs, err := b.relayCeilingRun(run, recs)
		if err != nil {
			r.errs = append(r.errs, err.Error())
			break
		}
		say("bench:   raw produce: %.0f records/s", rate)
		r.rates = append(r.rates, rate)
		r.obs = append(r.obs, obs)
	}
	return r
}

// ceilingOutputRecords are the relay's records for the ingest phase's
// passports.
func (b *bench) ceilingOutputRecords() ([]record.Record, error) {
	in := e2e.GenValid(1, b.cfg.ingestN)
	ocfg := outboxConfigOf(b.ingestorConfig())
	rows := make([]ceilingRow, len(in))
	for i := range in {
		r, err := buildRow(i, in[i], ocfg)
		if err != nil {
			return nil, fmt.Errorf("relay ceiling: %w", err)
		}
		rows[i] = r
	}
	return outputRecords(rows), nil
}

func (b *bench) relayCeilingRun(run int, recs []record.Record) (float64, observation, error) {
	defer b.resetOutputs()
	p, err := b.relayProducer("bench-relay-ceiling")
	if err != nil {
		return 0, observation{}, fmt.Errorf("relay ceiling: %w", err)
	}
	defer p.Close(5 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	// Connect and learn the topics' metadata before the clock starts, as
	// the relay has before its first batch.
	if errs := p.ProduceBatch(ctx, recs[:2]); errs[0] != nil || errs[1] != nil {
		return 0, observation{}, fmt.Errorf("relay ceiling: first records: %v, %v", errs[0], errs[1])
	}
	recs = recs[2:]

	s := b.startSampler("postgres", nil)
	start := time.Now()
	sem := make(chan struct{}, ceilingRelayInFlight)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failed int
	var firstErr error
	for lo := 0; lo < len(recs); lo += ceilingRelayChunk {
		sem <- struct{}{}
		wg.Add(1)
		go func(chunk []record.Record) {
			defer func() { <-sem; wg.Done() }()
			for _, err := range p.ProduceBatch(ctx, chunk) {
				if err != nil {
					mu.Lock()
					failed++
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
				}
			}
		}(recs[lo:min(lo+ceilingRelayChunk, len(recs))])
	}
	wg.Wait()
	el := time.Since(start)
	obs := s.stop()
	if failed > 0 {
		return 0, obs, fmt.Errorf("relay ceiling run %d: %d of %d records not delivered, first: %w", run, failed, len(recs), firstErr)
	}
	return float64(len(recs)) / el.Seconds(), obs, nil
}

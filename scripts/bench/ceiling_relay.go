package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pcp/route-processing/pkg/e2e"
	"github.com/pcp/route-processing/pkg/passport"
	"github.com/pcp/route-processing/pkg/record"
)

// The relay ceiling: what the relay's producer alone (pkg/kafkax with the
// relay's settings) publishes of the same records to the same broker,
// without PostgreSQL: claims, marks and the wait for each batch's reports
// are what the relay adds. The records are built as the ingestor builds
// the outbox rows (rows.go) from the ingest phase's passports, their
// payloads passed through jsonb as the relay reads them; chunks of
// ceilingRelayChunk records are handed to ProduceBatch by
// ceilingRelayInFlight callers, so that the client's queue never runs dry.
//
// Each run also produces them in the relay's shape: chunks of the relay's
// batch size, as many in flight as it has workers, each waiting for all
// its reports. That is not the ceiling (the relay may pipeline more) but
// tells how much of the gap is the shape rather than the database.

const (
	ceilingRelayChunk    = 5_000
	ceilingRelayInFlight = 4
)

type relayCeilingResults struct {
	rates  []float64 // records/s per run
	shaped []float64 // records/s per run in the relay's batch shape
	batch  int       // the relay's batch size and workers, for the shape
	work   int
	n      int
	errs   []string
	obs    []observation
}

func (b *bench) relayCeilingPhase(deadline time.Time) relayCeilingResults {
	var r relayCeilingResults
	recs, err := b.ceilingOutputRecords()
	if err != nil {
		r.errs = append(r.errs, err.Error())
		return r
	}
	r.n = len(recs)
	rc := b.relayConfig().Config.WithDefaults()
	r.batch, r.work = rc.BatchSize, rc.Workers
	for run := 0; run < b.cfg.runs; run++ {
		if run > 0 && !fits(deadline, r.obs) {
			break
		}
		say("bench: relay ceiling run %d/%d: raw producer with the relay's settings, %d records ...", run+1, b.cfg.runs, len(recs))
		rate, obs, err := b.relayCeilingRun(run, recs, ceilingRelayChunk, ceilingRelayInFlight)
		if err != nil {
			r.errs = append(r.errs, err.Error())
			break
		}
		shaped, _, err := b.relayCeilingRun(run, recs, r.batch, r.work)
		if err != nil {
			r.errs = append(r.errs, err.Error())
			break
		}
		say("bench:   raw produce: %.0f records/s; in the relay's shape (%d per batch, %d in flight): %.0f records/s", rate, r.batch, r.work, shaped)
		r.rates = append(r.rates, rate)
		r.shaped = append(r.shaped, shaped)
		r.obs = append(r.obs, obs)
	}
	return r
}

// ceilingOutputRecords are the relay's records for the ingest phase's
// passports.
func (b *bench) ceilingOutputRecords() ([]record.Record, error) {
	in := e2e.GenValid(1, b.cfg.ingestN)
	ev := b.ingestorConfig().Ingest.Events
	accepted := make([]passport.Accepted, len(in))
	for i := range in {
		acc, err := acceptRecord(i, in[i], ev)
		if err != nil {
			return nil, fmt.Errorf("relay ceiling: %w", err)
		}
		accepted[i] = acc
	}
	recs := outputRecords(accepted)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := jsonbPayloads(ctx, b.admin, recs); err != nil {
		return nil, fmt.Errorf("relay ceiling: %w", err)
	}
	return recs, nil
}

// jsonbPayloads replaces each record's payload by its text as the relay
// reads it back from the outbox's jsonb column (PostgreSQL's normal form:
// keys reordered, a space after each colon and comma), so that the ceiling
// publishes the relay's bytes, not the ingestor's rendering.
func jsonbPayloads(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, recs []record.Record) error {
	docs := make([]string, len(recs))
	for i := range recs {
		docs[i] = string(recs[i].Value)
	}
	rows, err := q.Query(ctx, `select d::jsonb::text from unnest($1::text[]) with ordinality as t(d, i) order by i`, docs)
	if err != nil {
		return fmt.Errorf("payloads through jsonb: %w", err)
	}
	defer rows.Close()
	i := 0
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			return fmt.Errorf("payloads through jsonb: %w", err)
		}
		if i < len(recs) {
			recs[i].Value = []byte(v)
		}
		i++
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("payloads through jsonb: %w", err)
	}
	if i != len(recs) {
		return fmt.Errorf("payloads through jsonb: %d of %d returned", i, len(recs))
	}
	return nil
}

// relayCeilingRun produces recs in chunks of chunk records, inFlight
// ProduceBatch calls at a time.
func (b *bench) relayCeilingRun(run int, recs []record.Record, chunk, inFlight int) (float64, observation, error) {
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
	sem := make(chan struct{}, inFlight)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failed int
	var firstErr error
	for lo := 0; lo < len(recs); lo += chunk {
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
		}(recs[lo:min(lo+chunk, len(recs))])
	}
	wg.Wait()
	el := time.Since(start)
	obs := s.stop()
	if failed > 0 {
		return 0, obs, fmt.Errorf("relay ceiling run %d: %d of %d records not delivered, first: %w", run, failed, len(recs), firstErr)
	}
	return float64(len(recs)) / el.Seconds(), obs, nil
}

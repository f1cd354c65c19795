package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/pcp/route-processing/pkg/record"
	"github.com/pcp/route-processing/pkg/relay"
	"github.com/pcp/route-processing/pkg/store"
)

// The relay's database bound: the relay's own code (pkg/relay with the
// service's settings, its claims, marks, LISTEN and housekeeping) in the
// bench process, on a copy of the same database as the relay phase, with a
// publisher that acknowledges every record at once. It is what the relay
// could publish if Kafka cost nothing; the raw-producer ceiling is the
// opposite bound (Kafka alone, no database). Their minimum is what the
// relay can reach on this machine, and which of the two is lower says where
// the gap to the raw-producer ceiling is.

type relayDBResults struct {
	rates []float64 // events/s per run
	errs  []string
	obs   []observation
}

func (b *bench) relayDBPhase(srcs []string, deadline time.Time) relayDBResults {
	var r relayDBResults
	if len(srcs) == 0 {
		r.errs = append(r.errs, "relay DB bound: no database from the ingest phase to copy")
		return r
	}
	for run := 0; run < b.cfg.runs; run++ {
		if run > 0 && !fits(deadline, r.obs) {
			break
		}
		say("bench: relay DB bound run %d/%d: the relay's code, a publisher that acknowledges at once ...", run+1, b.cfg.runs)
		rate, obs, err := b.relayDBRun(run, srcs[run%len(srcs)])
		if err != nil {
			r.errs = append(r.errs, err.Error())
			break
		}
		say("bench:   relay without Kafka: %.0f events/s", rate)
		r.rates = append(r.rates, rate)
		r.obs = append(r.obs, obs)
	}
	return r
}

// instantPublisher acknowledges every record at once: Kafka that costs
// nothing.
type instantPublisher struct{}

func (instantPublisher) ProduceBatch(_ context.Context, recs []record.Record) []error {
	return make([]error, len(recs))
}

func (instantPublisher) Probe(context.Context, string, time.Duration) error { return nil }

// relayDBRun copies src (every outbox row PENDING) and runs the relay on it
// until every row is PUBLISHED. The rate runs from the first published row
// to the last, by the relay's own counter, as in relayRun.
func (b *bench) relayDBRun(run int, src string) (float64, observation, error) {
	db := fmt.Sprintf("relay_db_%d_%d", run, time.Now().UnixNano()%1_000_000)
	b.cloneDB(src, db)
	defer b.dropDB(db)
	url := b.pg.URL(db)
	var rows int
	if err := b.scalar(url, `select count(*) from route_passport_outbox where status = 'PENDING'`, &rows); err != nil {
		return 0, observation{}, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pool, err := store.Open(ctx, url, "bench-relay-db-bound")
	if err != nil {
		return 0, observation{}, fmt.Errorf("relay DB bound: %w", err)
	}
	defer pool.Close()
	reg := prometheus.NewRegistry()
	cfg := b.relayConfig().Config
	cfg.Registerer = reg
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	r, err := relay.New(logger, store.NewOutbox(pool), instantPublisher{}, cfg)
	if err != nil {
		return 0, observation{}, fmt.Errorf("relay DB bound: %w", err)
	}
	s := b.startSampler(db, nil)
	done := make(chan error, 2)
	go func() { done <- r.Run(ctx) }()
	go func() {
		_ = store.Listen(ctx, logger, url, time.Second, r.Notified, func() { r.Connected(ctx) }, r.Relisten())
	}()

	f, err := followPublished(rows, func() (float64, error) {
		return counterValue(reg, "route_passport_outbox_published_total")
	})
	obs := s.stop()
	if err != nil {
		return 0, obs, fmt.Errorf("relay DB bound run %d: %w", run, err)
	}
	cancel()
	if err := <-done; err != nil {
		return 0, obs, fmt.Errorf("relay DB bound: run: %w", err)
	}
	var n int
	if err := b.scalar(url, `select count(*) from route_passport_outbox where status = 'PUBLISHED'`, &n); err != nil {
		return 0, obs, err
	}
	if n != rows {
		return 0, obs, fmt.Errorf("relay DB bound run %d: the counter reached %.0f but %d of %d rows are PUBLISHED", run, f.published, n, rows)
	}
	if f.rate <= 0 {
		return 0, obs, fmt.Errorf("relay DB bound run %d: every row was published within one 50 ms sample", run)
	}
	return f.rate, obs, nil
}

// counterValue sums the counter name over its labels in reg.
func counterValue(reg prometheus.Gatherer, name string) (float64, error) {
	mfs, err := reg.Gather()
	if err != nil {
		return 0, fmt.Errorf("gather metrics: %w", err)
	}
	var v float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if mf.GetType() == dto.MetricType_COUNTER {
				v += m.GetCounter().GetValue()
			}
		}
	}
	return v, nil
}

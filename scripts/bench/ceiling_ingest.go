package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pcp/route-processing/pkg/e2e"
	"github.com/pcp/route-processing/pkg/jsontext"
	"github.com/pcp/route-processing/pkg/outbox"
	"github.com/pcp/route-processing/pkg/passport"
	"github.com/pcp/route-processing/pkg/passportgen"
	"github.com/pcp/route-processing/pkg/store"
)

// The ingest ceiling: what PostgreSQL alone (fsync on, the same schema and
// indexes from the same migrations) takes of the rows the ingestor writes,
// with no Kafka in the way. Two connections each take 1,000 passports at a
// time: parse them and render the payloads (pkg/passport, as the service
// does), COPY the passports and the outbox rows into temporary tables, then
// INSERT … SELECT … ON CONFLICT into the real tables and NOTIFY, one
// transaction per 1,000.

const (
	ceilingIngestTxRows = 1_000
	ceilingIngestConns  = 2
)

type ingestCeilingResults struct {
	rates []float64 // passports/s per run
	n     int
	errs  []string
	obs   []observation
}

// ingestCeiling writes the ingest phase's passports with the DB-only
// writer, one run at a time, alone (ingestCeilingPhase) or each run right
// after a service run (ingestPhase).
type ingestCeiling struct {
	recs        []passportgen.Record
	ev          passport.EventConfig
	maxAttempts int
}

func (b *bench) newIngestCeiling() *ingestCeiling {
	cfg := b.ingestorConfig()
	return &ingestCeiling{
		recs: e2e.GenValid(1, b.cfg.ingestN), // the passports of the ingest phase
		ev:   cfg.Ingest.Events, maxAttempts: cfg.OutboxMaxAttempts,
	}
}

// run times run (of runs) and adds it to r.
func (c *ingestCeiling) run(b *bench, run, runs int, r *ingestCeilingResults) error {
	say("bench: ingest ceiling run %d/%d: DB-only writer, %d passports, COPY + INSERT … SELECT … ON CONFLICT, %d per transaction, %d connections ...",
		run+1, runs, len(c.recs), ceilingIngestTxRows, ceilingIngestConns)
	rate, obs, err := b.ingestCeilingRun(run, c.recs, c.ev, c.maxAttempts)
	if err != nil {
		r.errs = append(r.errs, err.Error())
		return err
	}
	say("bench:   DB-only: %.0f passports/s", rate)
	r.rates = append(r.rates, rate)
	r.obs = append(r.obs, obs)
	return nil
}

// ingestCeilingPhase runs the ceiling alone, when the ingest phase does
// not run (BENCH_ONLY=ingest-ceiling).
func (b *bench) ingestCeilingPhase(deadline time.Time) ingestCeilingResults {
	r := ingestCeilingResults{n: b.cfg.ingestN}
	c := b.newIngestCeiling()
	for run := 0; run < b.cfg.runs; run++ {
		if run > 0 && !fits(deadline, r.obs) {
			break
		}
		if c.run(b, run, b.cfg.runs, &r) != nil {
			break
		}
	}
	return r
}

func (b *bench) ingestCeilingRun(run int, recs []passportgen.Record, ev passport.EventConfig, maxAttempts int) (float64, observation, error) {
	db := fmt.Sprintf("ceiling_ingest_%d", run)
	url := b.createServiceDB(db)
	defer b.dropDB(db)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	conns := make([]*pgx.Conn, ceilingIngestConns)
	for i := range conns {
		c, err := pgx.Connect(ctx, url)
		if err != nil {
			return 0, observation{}, fmt.Errorf("ingest ceiling: connect: %w", err)
		}
		defer c.Close(context.Background())
		if _, err := c.Exec(ctx, ceilingTempTablesSQL); err != nil {
			return 0, observation{}, fmt.Errorf("ingest ceiling: temporary tables: %w", err)
		}
		conns[i] = c
	}
	s := b.startSampler(db, nil)
	start := time.Now()
	// One goroutine parses and builds the rows of the next chunks while
	// the two connections write, as the ingestor parses the next batch
	// while one commits.
	built := make(chan ceilingChunk, ceilingIngestConns)
	go func() {
		defer close(built)
		for lo := 0; lo < len(recs); lo += ceilingIngestTxRows {
			ch, err := buildCeilingChunk(recs, lo, min(lo+ceilingIngestTxRows, len(recs)), ev)
			select {
			case built <- ch:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	var wg sync.WaitGroup
	errs := make([]error, len(conns))
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ch := range built {
				err := ch.err
				if err == nil {
					err = writeCeilingChunk(ctx, c, ch, maxAttempts)
				}
				if err != nil {
					errs[i] = err
					cancel() // stops the builder and the other writer
					return
				}
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	obs := s.stop()
	for _, err := range errs {
		if err != nil {
			return 0, obs, fmt.Errorf("ingest ceiling run %d: %w", run, err)
		}
	}
	var have int
	if err := b.scalar(url, `select count(*) from route_passport_outbox`, &have); err != nil {
		return 0, obs, err
	}
	if have != 2*len(recs) {
		return 0, obs, fmt.Errorf("ingest ceiling run %d: %d outbox rows, want %d", run, have, 2*len(recs))
	}
	return float64(len(recs)) / el.Seconds(), obs, nil
}

// ceilingTempTablesSQL creates the session's staging tables, emptied by
// each commit. Their large columns use the real tables' compression (lz4,
// migration 005, where the server has it): a value compressed once while
// staged is inserted into the real table as it is, as the service's rows
// are compressed once; pglz staging would add a compression and a
// decompression per value that the service does not pay.
const ceilingTempTablesSQL = `
do $$ begin set default_toast_compression = 'lz4'; exception when others then null; end $$;
create temp table ceiling_passports (like route_passports including defaults including compression) on commit delete rows;
create temp table ceiling_outbox (
    id uuid, route_id uuid, event_type text, topic text, message_key text, payload jsonb, headers jsonb
) on commit delete rows`

var ceilingPassportCols = []string{
	"route_id", "route_name_full", "route_name_short", "ka_short", "ka_full",
	"orbit_number", "orbit_state", "interval_begin", "interval_end",
	"roll_angle_min", "roll_angle_max", "visir_angle_min", "visir_angle_max",
	"resolution_range", "resolution_azimuth", "polarisation", "processing_level",
	"geometry_wkt", "route_status", "trace_id", "correlation_id",
	"source_topic", "source_partition", "source_offset", "source_key", "raw_payload",
	"source_timestamp",
}

var ceilingOutboxCols = []string{"id", "route_id", "event_type", "topic", "message_key", "payload", "headers"}

// ceilingUpsertSQL is the service's upsert (last record of a route wins,
// but not over a later record of the same partition; created_at kept, times
// statement_timestamp()) from the temporary table, in route_id order so
// that the two connections lock rows in one order.
func ceilingUpsertSQL() string {
	cols := strings.Join(ceilingPassportCols, ", ")
	set := make([]string, 0, len(ceilingPassportCols))
	for _, c := range ceilingPassportCols[1:] {
		set = append(set, c+" = excluded."+c)
	}
	return "insert into route_passports (" + cols + ", created_at, updated_at)\n" +
		"select " + cols + ", statement_timestamp(), statement_timestamp() from ceiling_passports order by route_id\n" +
		"on conflict (route_id) do update set " + strings.Join(set, ", ") + ", updated_at = statement_timestamp()\n" +
		"where " + store.KeepLaterRecordSQL
}

// ceilingOutboxSQL inserts the outbox rows a route does not have yet, as
// the service's write.
const ceilingOutboxSQL = `
insert into route_passport_outbox (id, route_id, event_type, topic, message_key, payload, headers,
    status, attempts, max_attempts, next_attempt_at)
select id, route_id, event_type, topic, message_key, payload, headers, 'PENDING', 0, $1, now()
from ceiling_outbox order by route_id, event_type
on conflict (route_id, event_type) do nothing`

// ceilingChunk is one transaction's rows, ready for COPY.
type ceilingChunk struct {
	passports, outbox [][]any
	err               error
}

// buildCeilingChunk parses recs[lo:hi], accepts them and builds their
// rows as the service's write does: a route given twice keeps its last
// passport and its first events (the generated input has none twice), the
// headers stored as outbox.HeadersJSON renders them.
func buildCeilingChunk(recs []passportgen.Record, lo, hi int, ev passport.EventConfig) (ceilingChunk, error) {
	fail := func(err error) (ceilingChunk, error) { return ceilingChunk{err: err}, err }
	type route struct{ last, first int }
	accepted := make([]passport.Accepted, 0, hi-lo)
	at := make(map[string]*route, hi-lo)
	var order []*route
	for i := lo; i < hi; i++ {
		acc, err := acceptRecord(i, recs[i], ev)
		if err != nil {
			return fail(err)
		}
		accepted = append(accepted, acc)
		n := len(accepted) - 1
		if r, ok := at[acc.Passport.RouteID]; ok {
			r.last = n
			continue
		}
		r := &route{last: n, first: n}
		at[acc.Passport.RouteID] = r
		order = append(order, r)
	}
	ch := ceilingChunk{passports: make([][]any, 0, len(order)), outbox: make([][]any, 0, 2*len(order))}
	for _, r := range order {
		pr, err := passportCopyRow(&accepted[r.last])
		if err != nil {
			return fail(err)
		}
		ch.passports = append(ch.passports, pr)
		for _, e := range accepted[r.first].Events {
			rid, err := pgUUID(e.RouteID)
			if err != nil {
				return fail(err)
			}
			ch.outbox = append(ch.outbox, []any{pgtype.UUID{Bytes: e.ID, Valid: true}, rid, e.Type, e.Topic, e.Key,
				json.RawMessage(e.Payload), json.RawMessage(outbox.HeadersJSON(e.Headers))})
		}
	}
	return ch, nil
}

// writeCeilingChunk writes one chunk in one transaction.
func writeCeilingChunk(ctx context.Context, c *pgx.Conn, ch ceilingChunk, maxAttempts int) error {
	tx, err := c.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{"ceiling_passports"}, ceilingPassportCols, pgx.CopyFromRows(ch.passports)); err != nil {
		return fmt.Errorf("copy passports: %w", err)
	}
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{"ceiling_outbox"}, ceilingOutboxCols, pgx.CopyFromRows(ch.outbox)); err != nil {
		return fmt.Errorf("copy outbox rows: %w", err)
	}
	b := &pgx.Batch{}
	b.Queue(ceilingUpsertSQL())
	b.Queue(ceilingOutboxSQL, maxAttempts)
	b.Queue("select pg_notify($1, '')", store.NotifyChannel)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("insert … select: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

func passportCopyRow(acc *passport.Accepted) ([]any, error) {
	p, rec := acc.Passport, &acc.Source
	id, err := pgUUID(p.RouteID)
	if err != nil {
		return nil, err
	}
	return []any{
		id, p.RouteNameFull, p.RouteNameShort, p.KaShort, p.KaFull,
		p.OrbitNumber, p.OrbitState, p.IntervalBegin, p.IntervalEnd,
		p.RollAngle.Min, p.RollAngle.Max, p.VisirAngle.Min, p.VisirAngle.Max,
		p.ResolutionRange, p.ResolutionAzimuth, json.RawMessage(jsontext.AppendStrings(nil, p.Polarisation)), p.ProcessingLevel,
		p.GeometryWKT, p.RouteStatus, p.TraceID, p.CorrelationID,
		rec.Topic, rec.Partition, rec.Offset, rec.Key, json.RawMessage(acc.RawPayload()),
		pgtype.Timestamptz{Time: rec.Timestamp, Valid: !rec.Timestamp.IsZero()},
	}, nil
}

// pgUUID parses a route id as the service's write does (uuid.Parse).
func pgUUID(s string) (pgtype.UUID, error) {
	id, err := uuid.Parse(s)
	if err != nil {
		return pgtype.UUID{}, fmt.Errorf("route id %q: %w", s, err)
	}
	return pgtype.UUID{Bytes: id, Valid: true}, nil
}

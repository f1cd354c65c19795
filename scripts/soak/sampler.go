package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/pcp/route-processing/pkg/e2e"
	"github.com/pcp/route-processing/pkg/obs"
	"github.com/pcp/route-processing/scripts/internal/machine"
)

// sample is one row of the CSV: what the 10-second window ending at T looked
// like. Sizes are bytes, CPU is in cores over the window.
type sample struct {
	T        time.Duration // since the load started
	DBRead   bool          // the outbox readings (sizes, tuples, WAL) succeeded
	Hold     bool          // the snapshot was held during (part of) the window
	Outputs  int64         // output records that arrived in the window
	P50, P99 float64       // ms, of those outputs
	InRate   float64       // passports/s acknowledged by the broker
	OutRate  float64       // events/s published (relay counter)

	InputLag      int64   // records produced, not committed by the ingestor
	PendingFrom   string  // "sql": counted; "relay": the relay's gauges, when the count timed out; "": not read
	Pending       int64   // PENDING rows
	OldestPending float64 // s, age of the oldest PENDING row

	Heap, Index, Toast int64 // outbox heap, its indexes, its TOAST table + index
	Live, Dead         int64 // heap tuples (statistics)
	ToastDead          int64
	Autovacuums        int64 // cumulative runs on the heap and the TOAST table
	AutovacuumActive   int64 // autovacuum workers running now (any table)
	Deleted            int64 // cumulative rows deleted (the retention sweep)
	WAL                int64 // bytes written in the window

	Claims      int64   // claim statements in the window
	ClaimMs     float64 // their mean execution time
	SnapshotAge float64 // s, the oldest open transaction holding a snapshot

	// What the window's latency stood on: the checkpoints begun in it
	// (PostgreSQL counts one when it starts); the write and sync phases of
	// those that ended in it (PostgreSQL adds both times at the end; the
	// sync phase fsyncs every file the checkpoint wrote, and the commits'
	// WAL fsyncs queue behind it on a shared disk); and the ingestor's
	// commits in it, with those that took over slowCommit; and the slowest
	// acknowledgement of the broker probe that arrived in it
	// (brokerProbe: a pause of the broker itself, 0 when none arrived).
	CheckpointsBegun  int64
	CheckpointWriteMs float64
	CheckpointSyncMs  float64
	Commits           int64
	SlowCommits       int64
	BrokerAckMs       float64

	CPUIngestor, CPURelay, CPUPostgres, MachineBusy float64
	MachineSteal                                    float64 // share of the CPU the host gave to other tenants
}

// PendingRead says whether Pending and OldestPending were read.
func (s sample) PendingRead() bool { return s.PendingFrom != "" }

// Total is the outbox's whole size.
func (s sample) Total() int64 { return s.Heap + s.Index + s.Toast }

// sampler reads the database, the broker, the processes and the load every
// step. It reads through a small pool: a reading cut by its timeout closes
// its connection, and a single connection would fail every later one.
type sampler struct {
	db       *pgxpool.Pool
	adm      *kadm.Client
	tp       topics
	ingestor *e2e.Proc
	relay    *e2e.Proc
	pgPID    int // the postmaster
	load     *load
	probe    *brokerProbe

	// previous cumulative readings
	prevAt                         time.Time
	prevWAL, prevPublished         float64
	prevProduced                   int64
	prevClaims                     int64
	prevClaimMs                    float64
	prevCPU                        [3]float64
	prevBusy, prevSteal, prevTotal float64
	prevCheckpoints                int64
	prevWriteMs, prevSyncMs        float64
	prevCommits, prevSlowCommits   float64

	checkpointSQL string // checkpointerSQL or bgwriterSQL, by server version
}

func newSampler(ctx context.Context, dbURL string, adm *kadm.Client, tp topics, ing, rel *e2e.Proc, l *load, probe *brokerProbe) (*sampler, error) {
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return nil, fmt.Errorf("sampler: parse database URL: %w", err)
	}
	cfg.MaxConns = 2
	db, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("sampler: connect: %w", err)
	}
	s := &sampler{db: db, adm: adm, tp: tp, ingestor: ing, relay: rel, load: l, probe: probe}
	var backend int
	if err := db.QueryRow(ctx, `select pg_backend_pid()`).Scan(&backend); err != nil {
		db.Close()
		return nil, fmt.Errorf("sampler: backend pid: %w", err)
	}
	s.pgPID = machine.ParentPID(backend)
	var ownView bool
	if err := db.QueryRow(ctx, `select to_regclass('pg_catalog.pg_stat_checkpointer') is not null`).Scan(&ownView); err != nil {
		db.Close()
		return nil, fmt.Errorf("sampler: checkpointer statistics: %w", err)
	}
	s.checkpointSQL = map[bool]string{true: checkpointerSQL, false: bgwriterSQL}[ownView]
	s.read(ctx, 0) // sets the previous readings
	return s, nil
}

func (s *sampler) close() { s.db.Close() }

const outboxSQL = `
select pg_relation_size(c.oid),
       pg_indexes_size(c.oid),
       coalesce(pg_total_relation_size(nullif(c.reltoastrelid, 0)), 0),
       coalesce(st.n_live_tup, 0), coalesce(st.n_dead_tup, 0), coalesce(tt.n_dead_tup, 0),
       coalesce(st.autovacuum_count, 0) + coalesce(tt.autovacuum_count, 0),
       coalesce(st.n_tup_del, 0),
       (pg_current_wal_lsn() - '0/0'::pg_lsn)::float8,
       (select count(*) from pg_stat_activity where backend_type = 'autovacuum worker'),
       coalesce((select extract(epoch from now() - min(xact_start))::float8 from pg_stat_activity
                 where backend_xmin is not null and pid <> pg_backend_pid()), 0)
from pg_class c
left join pg_stat_all_tables st on st.relid = c.oid
left join pg_stat_all_tables tt on tt.relid = c.reltoastrelid
where c.oid = 'route_passport_outbox'::regclass`

const pendingSQL = `
select count(*), coalesce(extract(epoch from now() - min(created_at))::float8, 0)
from route_passport_outbox where status = 'PENDING'`

// claimStatsSQL finds the relay's claim statement (store.claimSQL) in
// pg_stat_statements.
const claimStatsSQL = `
select coalesce(sum(calls), 0)::bigint, coalesce(sum(total_exec_time), 0)::float8
from pg_stat_statements where query like '%with due as (%for update skip locked%'`

// The checkpoints begun and the milliseconds of the write and sync phases
// of those ended, cumulative: in pg_stat_checkpointer from PostgreSQL 17,
// in pg_stat_bgwriter before.
const (
	checkpointerSQL = `select num_timed + num_requested, write_time, sync_time from pg_stat_checkpointer`
	bgwriterSQL     = `select checkpoints_timed + checkpoints_req, checkpoint_write_time, checkpoint_sync_time from pg_stat_bgwriter`
)

// slowCommit is the bucket bound of the ingestor's committed stage
// (obs.StageMetric) above which a commit counts as slow: about seven times
// the stage's p99 at 1,000 passports/s in the bench (14 ms), and the p99
// of a window the report calls slow (slowWindowMs).
const slowCommit = `le="0.1"`

// readTimeout bounds each database reading of a sample on its own: the
// first count of PENDING rows after a held snapshot ends walks every dead
// entry the hold left in the pending index, and must not take the other
// readings' time with it.
const readTimeout = 8 * time.Second

// maxGaugeAge is the oldest refresh of the relay's pending gauges a sample
// takes: three of its default OUTBOX_STATS_INTERVAL (5 s).
const maxGaugeAge = 15 * time.Second

// read takes one sample; w is the index of the window that just ended.
func (s *sampler) read(ctx context.Context, w int) (sample, []error) {
	var out sample
	var errs []error
	query := func(what, sql string, dest ...any) bool {
		qctx, cancel := context.WithTimeout(ctx, readTimeout)
		defer cancel()
		if err := s.db.QueryRow(qctx, sql).Scan(dest...); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", what, err))
			return false
		}
		return true
	}
	now := time.Now()
	wal := s.prevWAL
	out.DBRead = query("outbox size", outboxSQL, &out.Heap, &out.Index, &out.Toast,
		&out.Live, &out.Dead, &out.ToastDead, &out.Autovacuums, &out.Deleted, &wal, &out.AutovacuumActive, &out.SnapshotAge)
	if query("pending", pendingSQL, &out.Pending, &out.OldestPending) {
		out.PendingFrom = "sql"
	} else {
		// What an operator reads instead: the relay's gauges of the same
		// two figures, refreshed every OUTBOX_STATS_INTERVAL, taken only
		// when fresh (a refresh that times out keeps the previous values).
		p, ok1 := s.relay.Metric("route_passport_outbox_pending")
		a, ok2 := s.relay.Metric("route_passport_outbox_oldest_pending_age_seconds")
		at, ok3 := s.relay.Metric("route_passport_outbox_pending_refreshed_timestamp_seconds")
		fresh := ok3 && time.Since(time.Unix(int64(at), 0)) <= maxGaugeAge
		if ok1 && ok2 && fresh {
			out.Pending, out.OldestPending, out.PendingFrom = int64(p), a, "relay"
		}
	}
	// A failed reading leaves the cumulative figures where they were: the
	// next window counts both.
	claims, claimMs := s.prevClaims, s.prevClaimMs
	query("claim stats", claimStatsSQL, &claims, &claimMs)
	checkpoints, writeMs, syncMs := s.prevCheckpoints, s.prevWriteMs, s.prevSyncMs
	query("checkpoints", s.checkpointSQL, &checkpoints, &writeMs, &syncMs)
	commits, slowCommits := s.prevCommits, s.prevSlowCommits
	if v, ok := s.ingestor.MetricValues(
		e2e.Series{Name: obs.StageMetric + "_count", Match: []string{`stage="committed"`}},
		e2e.Series{Name: obs.StageMetric + "_bucket", Match: []string{`stage="committed"`, slowCommit}},
	); ok {
		commits, slowCommits = v[0], v[0]-v[1]
	}
	qctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	ends, err1 := s.adm.ListEndOffsets(qctx, s.tp.input)
	offs, err2 := s.adm.FetchOffsets(qctx, s.tp.group)
	if err1 == nil && err2 == nil {
		ends.Each(func(o kadm.ListedOffset) {
			c, _ := offs.Lookup(s.tp.input, o.Partition)
			out.InputLag += o.Offset - max(c.At, 0)
		})
	}
	published, _ := s.relay.Metric("route_passport_outbox_published_total")
	cpu := [3]float64{machine.ProcCPU(s.ingestor.PID()), machine.ProcCPU(s.relay.PID()), machine.PostgresCPU(s.pgPID)}
	busy, steal, total := machine.CPU()
	produced := s.load.produced.Load()

	if !s.prevAt.IsZero() {
		secs := now.Sub(s.prevAt).Seconds()
		h := s.load.window(w)
		out.Outputs, out.P50, out.P99 = h.n, h.quantile(0.50), h.quantile(0.99)
		out.InRate = float64(produced-s.prevProduced) / secs
		out.OutRate = (published - s.prevPublished) / secs
		out.WAL = int64(wal - s.prevWAL)
		out.Claims = claims - s.prevClaims
		if out.Claims > 0 {
			out.ClaimMs = (claimMs - s.prevClaimMs) / float64(out.Claims)
		}
		out.CheckpointsBegun = checkpoints - s.prevCheckpoints
		out.CheckpointWriteMs, out.CheckpointSyncMs = writeMs-s.prevWriteMs, syncMs-s.prevSyncMs
		out.Commits = int64(commits - s.prevCommits)
		out.SlowCommits = int64(slowCommits - s.prevSlowCommits)
		out.BrokerAckMs = s.probe.worstMs(w)
		out.CPUIngestor = (cpu[0] - s.prevCPU[0]) / secs
		out.CPURelay = (cpu[1] - s.prevCPU[1]) / secs
		out.CPUPostgres = (cpu[2] - s.prevCPU[2]) / secs
		if total > s.prevTotal {
			out.MachineBusy = (busy - s.prevBusy) / (total - s.prevTotal)
			out.MachineSteal = (steal - s.prevSteal) / (total - s.prevTotal)
		}
	}
	s.prevAt, s.prevWAL, s.prevPublished, s.prevProduced = now, wal, published, produced
	s.prevClaims, s.prevClaimMs, s.prevCPU, s.prevBusy, s.prevSteal, s.prevTotal = claims, claimMs, cpu, busy, steal, total
	s.prevCheckpoints, s.prevWriteMs, s.prevSyncMs = checkpoints, writeMs, syncMs
	s.prevCommits, s.prevSlowCommits = commits, slowCommits
	return out, errs
}

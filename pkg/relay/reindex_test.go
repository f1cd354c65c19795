package relay

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/pcp/route-processing/pkg/outbox"
	"github.com/pcp/route-processing/pkg/relay/relaytest"
	"github.com/pcp/route-processing/pkg/store"
	"github.com/pcp/route-processing/pkg/testenv"
)

func TestPlanReindex(t *testing.T) {
	t.Parallel()
	const minBytes = 1 << 20
	ixs := []outbox.Index{
		// A PENDING index after a hold: 100 MB for 2,000 entries, counted
		// by the vacuum after it.
		{Name: "route_passport_outbox_pending_idx", Bytes: 100 << 20, Entries: 2_000, CountedBytes: 100 << 20, Valid: true},
		// A healthy uuid index: 5 M entries at 70 % fill.
		{Name: "route_passport_outbox_pkey", Bytes: 5_000_000 * 40, Entries: 5_000_000, CountedBytes: 5_000_000 * 40, Valid: true},
		// Bloated, but below minBytes.
		{Name: "route_passport_outbox_failed_idx", Bytes: minBytes - 1, Entries: 0, CountedBytes: minBytes - 1, Valid: true},
		// Never counted: left alone whatever its size.
		{Name: "route_passport_outbox_published_idx", Bytes: 1 << 30, Entries: -1, Valid: true},
		// Counted at its build on an empty table (one page, no entries),
		// grown since: the count is stale, not the index bloated.
		{Name: "route_passport_outbox_route_event_key", Bytes: 12 << 20, Entries: 0, CountedBytes: 8192, Valid: true},
		// Leftovers of an interrupted REINDEX CONCURRENTLY, and an invalid
		// index that is not one (an operator's build in progress).
		{Name: "route_passport_outbox_pending_idx_ccnew", Bytes: 8192, Entries: 0, Valid: false},
		{Name: "route_passport_outbox_pkey_ccold1", Bytes: 8192, Entries: 0, Valid: false},
		{Name: "route_passport_outbox_operator_idx", Bytes: 8192, Entries: 0, Valid: false},
	}
	names := func(ixs []outbox.Index) []string {
		var n []string
		for _, ix := range ixs {
			n = append(n, ix.Name)
		}
		return n
	}

	p := planReindex(ixs, outbox.TableHealth{OldestXactAge: time.Second}, minBytes)
	require.Equal(t, []string{"route_passport_outbox_pending_idx"}, names(p.rebuild))
	require.Equal(t, []string{"route_passport_outbox_pending_idx_ccnew", "route_passport_outbox_pkey_ccold1"}, names(p.drop))

	// At the threshold: bloatFactor × compact size.
	size := int64(bloatFactor * compactEntryBytes * 100_000)
	edge := outbox.Index{Name: "x", Bytes: size, Entries: 100_000, CountedBytes: size, Valid: true}
	require.Len(t, planReindex([]outbox.Index{edge}, outbox.TableHealth{}, minBytes).rebuild, 1)
	edge.Bytes, edge.CountedBytes = size-1, size-1
	require.Empty(t, planReindex([]outbox.Index{edge}, outbox.TableHealth{}, minBytes).rebuild)
	// The count taken at 90 % of the size is current; at less, stale.
	edge.Bytes, edge.CountedBytes = size, int64(countedShare*float64(size))
	require.Len(t, planReindex([]outbox.Index{edge}, outbox.TableHealth{}, minBytes).rebuild, 1)
	edge.CountedBytes--
	require.Empty(t, planReindex([]outbox.Index{edge}, outbox.TableHealth{}, minBytes).rebuild)

	// A held horizon: nothing, since both statements would wait for it.
	p = planReindex(ixs, outbox.TableHealth{OldestXactAge: reindexHorizonAge + time.Second}, minBytes)
	require.Empty(t, p.rebuild)
	require.Empty(t, p.drop)
}

// TestReindexPass bloats the PENDING index on a real PostgreSQL the way a
// churn does (rows inserted PENDING, then marked PUBLISHED and vacuumed:
// the entries go, the pages stay), leaves behind what an interrupted
// REINDEX CONCURRENTLY leaves, and runs one pass: the bloated index is
// rebuilt small, the healthy ones are not touched, the leftover is dropped,
// and the lease keeps other relays from a second pass.
func TestReindexPass(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	pool := testenv.Pool(t)
	relaytest.Seed(t, pool, 20_000, "a", "b")
	_, err := pool.Exec(ctx, `update route_passport_outbox set status = 'PUBLISHED', published_at = now()`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `vacuum analyze route_passport_outbox`)
	require.NoError(t, err)
	// A unique index on a column with duplicates fails its build and stays
	// INVALID, as a REINDEX CONCURRENTLY stopped half way leaves its copy.
	_, err = pool.Exec(ctx, `create unique index concurrently route_passport_outbox_pending_idx_ccnew on route_passport_outbox (event_type)`)
	require.Error(t, err)

	type state struct {
		oid   uint32
		bytes int64
	}
	read := func() map[string]state {
		rows, err := pool.Query(ctx, `
select c.relname::text, c.oid::int8, pg_relation_size(c.oid)
from pg_index i join pg_class c on c.oid = i.indexrelid
where i.indrelid = 'route_passport_outbox'::regclass`)
		require.NoError(t, err)
		defer rows.Close()
		m := map[string]state{}
		for rows.Next() {
			var name string
			var oid, bytes int64
			require.NoError(t, rows.Scan(&name, &oid, &bytes))
			m[name] = state{uint32(oid), bytes}
		}
		require.NoError(t, rows.Err())
		return m
	}
	before := read()
	const pending = "route_passport_outbox_pending_idx"
	require.Contains(t, before, "route_passport_outbox_pending_idx_ccnew")
	require.Greater(t, before[pending].bytes, int64(256<<10), "the PENDING index should hold the pages of 40,000 entries")

	reg := prometheus.NewRegistry()
	s := store.NewOutbox(pool)
	r, err := New(slog.New(slog.NewTextHandler(io.Discard, nil)), s, &fakePublisher{},
		Config{ReindexMinBytes: 64 << 10, ReindexInterval: 2 * time.Hour, Registerer: reg})
	require.NoError(t, err)
	r.reindexPass(ctx)

	after := read()
	require.NotContains(t, after, "route_passport_outbox_pending_idx_ccnew", "the leftover should be dropped")
	require.NotEqual(t, before[pending].oid, after[pending].oid, "the PENDING index should be rebuilt")
	require.LessOrEqual(t, after[pending].bytes, int64(16<<10), "the rebuilt PENDING index holds no entries")
	for name, st := range before {
		if name == pending || name == "route_passport_outbox_pending_idx_ccnew" {
			continue
		}
		require.Equal(t, st.oid, after[name].oid, "%s is not bloated and should not be rebuilt", name)
	}
	require.Equal(t, 1.0, metricValue(t, r.m.indexRebuilds.WithLabelValues(pending)))
	r.refreshIndexGauges(ctx)
	require.Equal(t, float64(after[pending].bytes), metricValue(t, r.m.indexBytes.WithLabelValues(pending)))
	require.Equal(t, float64(after["route_passport_outbox_pkey"].bytes),
		metricValue(t, r.m.indexBytes.WithLabelValues("route_passport_outbox_pkey")))

	// The pass left the lease held for ReindexInterval: no other relay runs
	// one before then.
	var leftS float64
	require.NoError(t, pool.QueryRow(ctx,
		`select extract(epoch from maintenance_until - now())::float8 from outbox_relay_control where id`).Scan(&leftS))
	require.Greater(t, leftS, (119 * time.Minute).Seconds())
	won, err := s.LeaseMaintenance(ctx, time.Minute)
	require.NoError(t, err)
	require.False(t, won, "the lease is held")
	require.NoError(t, s.HoldMaintenance(ctx, 0))
	won, err = s.LeaseMaintenance(ctx, time.Minute)
	require.NoError(t, err)
	require.True(t, won, "an ended lease can be taken")
}

// metricValue reads a counter's or a gauge's value.
func metricValue(t *testing.T, m prometheus.Metric) float64 {
	t.Helper()
	var d dto.Metric
	require.NoError(t, m.Write(&d))
	if d.Counter != nil {
		return d.Counter.GetValue()
	}
	return d.Gauge.GetValue()
}

// TestOutboxGaugesForgetADroppedIndex: the size series of an index dropped
// since the last refresh (a migration, an operator) goes, instead of
// keeping its last size for as long as the process runs; the table-health
// gauges' refresh is timestamped, as the pending gauges' is.
func TestOutboxGaugesForgetADroppedIndex(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool := testenv.Pool(t)
	const extra = "route_passport_outbox_operator_idx"
	_, err := pool.Exec(ctx, `create index `+extra+` on route_passport_outbox (event_type)`)
	require.NoError(t, err)

	reg := prometheus.NewRegistry()
	r, err := New(slog.New(slog.NewTextHandler(io.Discard, nil)), store.NewOutbox(pool), &fakePublisher{},
		Config{Registerer: reg})
	require.NoError(t, err)
	indexes := func() map[string]bool {
		t.Helper()
		mfs, err := reg.Gather()
		require.NoError(t, err)
		names := map[string]bool{}
		for _, mf := range mfs {
			if mf.GetName() != "route_passport_outbox_index_bytes" {
				continue
			}
			for _, m := range mf.GetMetric() {
				names[m.GetLabel()[0].GetValue()] = true
			}
		}
		return names
	}

	before := time.Now()
	r.readGauges(ctx)
	require.True(t, indexes()[extra], "the operator's index is exported: %v", indexes())
	require.True(t, indexes()["route_passport_outbox_pkey"])
	require.GreaterOrEqual(t, metricValue(t, r.m.healthAt), float64(before.Unix()), "the table health's refresh time")

	_, err = pool.Exec(ctx, `drop index `+extra)
	require.NoError(t, err)
	r.readGauges(ctx)
	require.False(t, indexes()[extra], "the dropped index's series is gone: %v", indexes())
	require.True(t, indexes()["route_passport_outbox_pkey"], "the others stay")
}

package main

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pcp/route-processing/scripts/internal/machine"
)

// reportedSettings are the server settings every report names: those the
// steady state's storage, vacuum and commit latency depend on
// (docs/capacity.md), beside any the rig set (SOAK_PG_SETTINGS included).
var reportedSettings = []string{"autovacuum_naptime", "autovacuum_vacuum_cost_limit", "autovacuum_vacuum_cost_delay",
	"autovacuum_max_workers", "shared_buffers", "max_wal_size", "fsync", "synchronous_commit", "full_page_writes",
	"backend_flush_after", "wal_compression"}

// machineState describes the machine and the server for the report.
func (r *rig) machineState(ctx context.Context) string {
	var version string
	_ = r.admin.QueryRow(ctx, `select split_part(version(), ' on ', 1)`).Scan(&version)
	names := append(append([]string{}, reportedSettings...), r.settings...)
	var av []string
	rows, err := r.admin.Query(ctx, `select name || '=' || current_setting(name) from pg_settings
		where name = any($1) order by name`, names)
	if err == nil {
		for rows.Next() {
			var s string
			if rows.Scan(&s) == nil {
				av = append(av, s)
			}
		}
		rows.Close()
	}
	model := machine.CPUModel()
	if model == "" {
		model = "unknown CPU"
	}
	// What the host gives the VM moves by itself and shows in no CPU
	// figure (machine.Capacity); measured before the load starts.
	return fmt.Sprintf("%d cores (%s), %s, %s; server settings: %s; load average at the start: %s; the host gave: %s; started %s",
		runtime.NumCPU(), model, runtime.Version(), version, strings.Join(av, ", "),
		machine.LoadAvg(), machine.MeasureCapacity(3), time.Now().UTC().Format("2006-01-02 15:04 UTC"))
}

// statusCounts counts outbox rows per status (exact).
func statusCounts(ctx context.Context, dbURL string) map[string]int64 {
	out := map[string]int64{}
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return out
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, `select status, count(*) from route_passport_outbox group by status`)
	if err != nil {
		return out
	}
	defer rows.Close()
	for rows.Next() {
		var s string
		var n int64
		if rows.Scan(&s, &n) == nil {
			out[s] = n
		}
	}
	return out
}

// passportBytes measures what the passports cost at the end of a run: the
// route_passports table (heap, indexes, TOAST) per row, and the WAL written
// per passport over the whole run (ingest, relay, sweep and vacuum).
func passportBytes(ctx context.Context, dbURL string, walTotal int64) string {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return "not measured: " + err.Error()
	}
	defer conn.Close(context.Background())
	var n, heap, idx, toast int64
	err = conn.QueryRow(ctx, `select (select count(*) from route_passports), pg_relation_size(c.oid), pg_indexes_size(c.oid),
		coalesce(pg_total_relation_size(nullif(c.reltoastrelid, 0)), 0)
		from pg_class c where c.oid = 'route_passports'::regclass`).Scan(&n, &heap, &idx, &toast)
	if err != nil || n == 0 {
		return fmt.Sprintf("not measured (%v)", err)
	}
	var avgRaw, avgStored float64
	_ = conn.QueryRow(ctx, `select avg(octet_length(raw_payload::text))::float8, avg(pg_column_size(raw_payload) + pg_column_size(geometry_wkt))::float8
		from (select raw_payload, geometry_wkt from route_passports limit 10000) x`).Scan(&avgRaw, &avgStored)
	return fmt.Sprintf("route_passports: %d rows, %.0f bytes per passport (heap %.0f, indexes %.0f, TOAST %.0f; raw_payload text %.0f bytes, stored raw_payload + geometry_wkt %.0f bytes); WAL of the whole run %.0f bytes per passport",
		n, float64(heap+idx+toast)/float64(n), float64(heap)/float64(n), float64(idx)/float64(n), float64(toast)/float64(n), avgRaw, avgStored, float64(walTotal)/float64(n))
}

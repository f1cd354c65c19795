//go:build soak

package soak

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// machineState describes the machine and the server for the report.
func machineState(ctx context.Context, admin *pgxpool.Pool) string {
	var version string
	_ = admin.QueryRow(ctx, `select split_part(version(), ' on ', 1)`).Scan(&version)
	var av []string
	rows, err := admin.Query(ctx, `select name || '=' || setting || coalesce(unit, '') from pg_settings
		where name in ('autovacuum_naptime', 'autovacuum_vacuum_cost_limit', 'autovacuum_vacuum_cost_delay',
		  'autovacuum_max_workers', 'shared_buffers', 'max_wal_size', 'fsync', 'synchronous_commit', 'full_page_writes') order by name`)
	if err == nil {
		for rows.Next() {
			var s string
			if rows.Scan(&s) == nil {
				av = append(av, s)
			}
		}
		rows.Close()
	}
	load, _ := os.ReadFile("/proc/loadavg")
	model := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "model name") {
				_, model, _ = strings.Cut(l, ": ")
				break
			}
		}
	}
	return fmt.Sprintf("%d cores (%s), %s, %s; server settings: %s; load average at the start: %s; started %s",
		runtime.NumCPU(), model, runtime.Version(), version, strings.Join(av, ", "),
		strings.TrimSpace(string(load)), time.Now().UTC().Format("2006-01-02 15:04 UTC"))
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

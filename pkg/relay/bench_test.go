package relay_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pcp/route-processing/pkg/relay"
	"github.com/pcp/route-processing/pkg/relay/relaytest"
	"github.com/pcp/route-processing/pkg/store"
	"github.com/pcp/route-processing/pkg/testenv"
)

// BenchmarkRelay drains N pending rows (BENCH_RELAY_ROWS, default 20,000) to
// PUBLISHED against a PostgreSQL cluster with fsync on and the in-process
// broker, and reports events/s and the process's CPU per event (the
// relay's and the in-process broker's). Seeding is not timed.
//
//	go test ./pkg/relay -run '^$' -bench BenchmarkRelay -benchtime 1x
func BenchmarkRelay(b *testing.B) {
	rows := 20_000
	if v, err := strconv.Atoi(os.Getenv("BENCH_RELAY_ROWS")); err == nil && v > 0 {
		rows = v
	}
	cluster := testenv.NewPostgresCluster(b, testenv.PostgresOptions{Fsync: true})
	bootstrap := testenv.KafkaBootstrap(b)
	cases := []struct {
		name string
		cfg  relay.Config
	}{
		{"seed=batch50-poll1s", relay.Config{BatchSize: 50, PollInterval: time.Second}},
		{"default=batch500", relay.Config{BatchSize: 500}},
		{"batch500-workers1", relay.Config{BatchSize: 500, Workers: 1}},
		{"batch1000-workers3", relay.Config{BatchSize: 1000, Workers: 3}},
	}
	for ci, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			url := cluster.CreateDatabase(b, fmt.Sprintf("bench_%d_%d", ci, time.Now().UnixNano()), true)
			ctx := context.Background()
			pool, err := store.Open(ctx, url, "test")
			if err != nil {
				b.Fatal(err)
			}
			defer pool.Close()
			tb := &testBundle{url: url, pool: pool, outbox: store.NewOutbox(pool), bootstrap: bootstrap}
			in := testenv.Topic(b, "bench-in", 3)
			geo := testenv.Topic(b, "bench-geo", 3)
			var total, cpu time.Duration
			var events int
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				relaytest.Seed(b, pool, rows/2, in, geo)
				if _, err := pool.Exec(ctx, `vacuum analyze route_passport_outbox`); err != nil {
					b.Fatal(err)
				}
				want := published(b, pool) + rows
				b.StartTimer()
				start, cpu0 := time.Now(), testenv.ProcessCPU(b)
				rr := tb.start(b, c.cfg)
				for published(b, pool) < want {
					time.Sleep(20 * time.Millisecond)
				}
				total += time.Since(start)
				cpu += testenv.ProcessCPU(b) - cpu0
				events += rows
				b.StopTimer()
				rr.stop()
				b.StartTimer()
			}
			b.ReportMetric(float64(events)/total.Seconds(), "events/s")
			b.ReportMetric(float64(cpu.Microseconds())/float64(events), "cpu-µs/event")
			// Backends flush their statistics when they exit: close the
			// pool, then read them on a fresh connection.
			pool.Close()
			time.Sleep(500 * time.Millisecond)
			if conn, err := pgx.Connect(ctx, url); err == nil {
				var upd, hot int64
				if err := conn.QueryRow(ctx, `select n_tup_upd, n_tup_hot_upd from pg_stat_user_tables where relname = 'route_passport_outbox'`).Scan(&upd, &hot); err == nil {
					b.Logf("%d rows: %d updates, %d of them HOT (claims can be HOT, marks cannot)", events, upd, hot)
				}
				conn.Close(ctx)
			}
		})
	}
}

func published(b testing.TB, pool *pgxpool.Pool) int {
	return relaytest.Count(b, pool, "PUBLISHED")
}

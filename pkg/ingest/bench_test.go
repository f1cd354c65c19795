package ingest_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/pcp/route-processing/pkg/ingest"
	"github.com/pcp/route-processing/pkg/testenv"
)

// BenchmarkIngest measures throughput from a pre-filled topic to committed
// offsets, against a PostgreSQL cluster with fsync on (each commit pays for
// its WAL flush). Each iteration ingests the whole topic into a fresh
// database with a fresh consumer group, so every record is an insert. It
// also reports the process's CPU per passport (the ingestor's, and the
// broker's when testenv runs kfake in-process).
//
//	go test ./pkg/ingest -run '^$' -bench BenchmarkIngest -benchtime 1x
func BenchmarkIngest(b *testing.B) {
	cluster := testenv.NewPostgresCluster(b, testenv.PostgresOptions{Fsync: true})
	for _, bc := range []struct {
		batch, records int
		wait           time.Duration // BatchMaxWait; 0 is the default (natural batching)
	}{
		{batch: 1, records: 2_000},
		{batch: 500, records: 30_000},
		{batch: 500, records: 30_000, wait: 20 * time.Millisecond}, // the old default, for comparison
	} {
		b.Run(fmt.Sprintf("batch=%d/wait=%s", bc.batch, bc.wait), func(b *testing.B) {
			tb := setup(b, 3, cluster.CreateDatabase(b, fmt.Sprintf("bench_setup_%d_%s", bc.batch, uuid.NewString()[:6]), true))
			recs, _ := validRecords(b, bc.records)
			end := endOffsets(testenv.Produce(b, tb.bootstrap, tb.topic, recs...))

			var total int
			var elapsed, cpu time.Duration
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				tb.dbURL = cluster.CreateDatabase(b, fmt.Sprintf("bench_%d_%d_%s", bc.batch, i, uuid.NewString()[:6]), true)
				tb.reopen(b)
				tb.group = "bench-" + uuid.NewString()[:8]
				reached := make(chan struct{})
				var once sync.Once
				start, cpu0 := time.Now(), testenv.ProcessCPU(b)
				b.StartTimer()
				r := tb.start(b, func(c *ingest.Config) {
					c.BatchSize = bc.batch
					c.BatchMaxWait = bc.wait
					c.BeforeCommit = func(offsets map[int32]int64) error {
						// Offsets are committed per partition; the last
						// commit reaching the end completes the run.
						tb.noteCommit(offsets)
						if tb.reachedEnd(end) {
							once.Do(func() { close(reached) })
						}
						return nil
					}
				})
				select {
				case <-reached:
				case <-time.After(10 * time.Minute):
					b.Fatal("offsets did not reach the end")
				}
				elapsed += time.Since(start)
				cpu += testenv.ProcessCPU(b) - cpu0
				total += bc.records
				b.StopTimer()
				if err := r.stop(b); err != nil {
					b.Fatal(err)
				}
				if n := tb.count(b, "select count(*) from route_passports"); n != bc.records {
					b.Fatalf("%d passports, want %d", n, bc.records)
				}
			}
			b.ReportMetric(float64(total)/elapsed.Seconds(), "passports/s")
			b.ReportMetric(float64(cpu.Microseconds())/float64(total), "cpu-µs/passport")
		})
	}
}

package main

import (
	"context"
	"fmt"
	"time"
)

// walSegments is how many WAL segments (16 MB each) the bench has
// PostgreSQL prepare before the latency runs: more than a run at 1,000
// passports/s writes (about 13 MB of WAL a second, 2026-12-04). A run at
// 4,000/s writes more and checkpoints within the run anyway.
const walSegments = 48

// recycleWAL leaves the cluster's WAL as a server in its steady state has
// it: segments that a checkpoint recycled, ready to be written over, rather
// than new files that a committing backend must first write full of zeros
// and fsync while it holds WALWriteLock (IO:WALInitWrite, IO:WALInitSync),
// every commit waiting meanwhile. On a fresh cluster that is a new segment
// every 1.2 s at 1,000 passports/s. A full make bench reaches the latency
// phase with WAL that the earlier phases' checkpoints recycled; with
// BENCH_ONLY=latency it would not. With it, no segment file is created
// during the runs at 1,000/s; the effect on their p99 is below the
// machine's noise (docs/performance.md, What the p99 at 1,000/s is made of).
//
// Switching segments fills them (a switch writes nothing unless WAL was
// written since the previous one); the checkpoint then recycles them.
func (b *bench) recycleWAL() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	exec := func(q string) error {
		if _, err := b.admin.Exec(ctx, q); err != nil {
			return fmt.Errorf("prepare WAL: %s: %w", q, err)
		}
		return nil
	}
	if err := exec(`create table if not exists bench_wal_fill (n int)`); err != nil {
		return err
	}
	for i := 0; i < walSegments; i++ {
		if err := exec(`insert into bench_wal_fill values (1)`); err != nil {
			return err
		}
		if err := exec(`select pg_switch_wal()`); err != nil {
			return err
		}
	}
	if err := exec(`drop table bench_wal_fill`); err != nil {
		return err
	}
	return exec(`checkpoint`)
}

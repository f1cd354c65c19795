package store_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/pcp/route-processing/pkg/passport"
	"github.com/pcp/route-processing/pkg/relay/relaytest"
	"github.com/pcp/route-processing/pkg/store"
	"github.com/pcp/route-processing/pkg/testenv"
)

// A real serialization failure is a conflict (run again), not an outage: a
// serializable transaction updating a row another committed since it
// began.
func TestSerializationFailureIsAConflict(t *testing.T) {
	t.Parallel()
	url := testenv.DatabaseURL(t)
	ctx := context.Background()
	connect := func() *pgx.Conn {
		c, err := pgx.Connect(ctx, url)
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close(ctx) })
		return c
	}
	a, b := connect(), connect()
	_, err := a.Exec(ctx, "create table t_conflict (id int primary key, n int); insert into t_conflict values (1, 0)")
	require.NoError(t, err)
	tx, err := a.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.Serializable})
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, "select n from t_conflict where id = 1")
	require.NoError(t, err)
	_, err = b.Exec(ctx, "update t_conflict set n = n + 1 where id = 1")
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "update t_conflict set n = n + 1 where id = 1")
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "40001", pgErr.Code)
	require.Equal(t, store.KindConflict, store.Classify(fmt.Errorf("claim: %w", err)))
	require.Equal(t, store.KindConflict, store.Classify(&pgconn.PgError{Code: "40P01"}), "deadlock detected")
	require.Equal(t, store.KindUnavailable, store.Classify(&pgconn.PgError{Code: "40003"}), "statement completion unknown")
}

// With default_transaction_isolation = serializable for the database (an
// operator's policy), relay workers racing for the same rows lose
// serialization races many times a second; the store runs such a claim or
// mark again, so the callers see no error and every row is published once.
// Before, each lost race came back as an error: the relay said the
// database was unreachable, turned not ready and backed off.
func TestClaimsAndMarksUnderSerializableDefault(t *testing.T) {
	t.Parallel()
	ctx, b := setupOutbox(t)
	var db string
	require.NoError(t, b.pool.QueryRow(ctx, "select current_database()").Scan(&db))
	_, err := b.pool.Exec(ctx, "alter database "+pgx.Identifier{db}.Sanitize()+" set default_transaction_isolation = 'serializable'")
	require.NoError(t, err)
	b.pool.Reset() // new sessions take the setting
	var iso string
	require.NoError(t, b.pool.QueryRow(ctx, "show default_transaction_isolation").Scan(&iso))
	require.Equal(t, "serializable", iso)
	const passports = 1500
	relaytest.Seed(t, b.pool, passports, "a", "b")

	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		errs   []error
		marked int64
	)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				rows, err := claim(ctx, b, 10, time.Minute)
				if err == nil && len(rows) == 0 {
					return
				}
				var n int64
				if err == nil {
					n, err = b.outbox.MarkPublished(ctx, leasesOf(rows))
				}
				mu.Lock()
				marked += n
				if err != nil {
					errs = append(errs, err)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	require.Empty(t, errs, "claims and marks failed")
	require.EqualValues(t, 2*passports, marked)
	require.Equal(t, 2*passports, relaytest.Count(t, b.pool, "PUBLISHED"))
}

// With default_transaction_isolation = serializable for the database, an
// ingest write queued behind an uncommitted write of the same route fails
// with 40001 once that one commits, if it runs at the default. Both
// BeginWrite and Write begin their transactions at read committed, and go
// through.
func TestWritesUnderSerializableDefault(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testenv.Pool(t)
	var db string
	require.NoError(t, pool.QueryRow(ctx, "select current_database()").Scan(&db))
	_, err := pool.Exec(ctx, "alter database "+pgx.Identifier{db}.Sanitize()+" set default_transaction_isolation = 'serializable'")
	require.NoError(t, err)
	pool.Reset()
	s := store.NewPassports(pool, 3)

	for name, write := range bothWrites(ctx, s) {
		id := uuid.NewString()
		first, err := s.BeginWrite(ctx, []passport.Accepted{passportRecord(t, id, "insert", "t1", 1)}, 0)
		require.NoError(t, err, name)
		second := make(chan error, 1)
		go func() { second <- write(passportRecord(t, id, "update", "t2", 2)) }()
		time.Sleep(200 * time.Millisecond) // the second write waits for the first's row locks
		require.NoError(t, first.Commit(ctx), name)
		select {
		case err := <-second:
			require.NoError(t, err, name)
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the second write did not finish after the first committed", name)
		}
		var got string
		require.NoError(t, pool.QueryRow(ctx, "select route_name_full from route_passports where route_id = $1", id).Scan(&got))
		require.Equal(t, "update", got, name)
	}
}

// A conflict whose rerun the caller's deadline or cancel stops is reported
// as that deadline (a timeout: KindUnavailable, TimedOut) or that stop
// (KindCanceled), not as a conflict to run again: joined with the server's
// 40001, a passed deadline classified as KindConflict, and the ingestor
// retried a write that had run out of its bound as a lost race.
func TestConflictStoppedByTheCallersContext(t *testing.T) {
	t.Parallel()
	conflict := func() error {
		return fmt.Errorf("write: %w", &pgconn.PgError{Code: "40001", Message: "could not serialize access"})
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Millisecond)
	defer cancel()
	err := store.RetryConflicts(ctx, conflict)
	require.Equal(t, store.KindUnavailable, store.Classify(err), "%v", err)
	require.True(t, store.TimedOut(err), "%v", err)
	require.Contains(t, err.Error(), "40001", "the conflict is still named")

	ctx, cancel = context.WithCancel(context.Background())
	calls := 0
	err = store.RetryConflicts(ctx, func() error {
		if calls++; calls == 2 {
			cancel()
		}
		return conflict()
	})
	require.Equal(t, store.KindCanceled, store.Classify(err), "%v", err)
	require.False(t, store.TimedOut(err), "%v", err)
}

package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/pcp/route-processing/pkg/store"
	"github.com/pcp/route-processing/pkg/testenv"
)

// RefusalReason tells the server's message, code and column, never the
// detail, which may quote the data.
func TestRefusalReason(t *testing.T) {
	t.Parallel()
	pgErr := &pgconn.PgError{Code: "22P05", Message: "unsupported Unicode escape sequence", ColumnName: "raw_payload", Detail: "SECRET-DATA"}
	got := store.RefusalReason(fmt.Errorf("write 3 passports: %w", pgErr))
	require.Equal(t, "unsupported Unicode escape sequence (SQLSTATE 22P05), column raw_payload", got)
	require.NotContains(t, got, "SECRET")
	require.Empty(t, store.RefusalReason(errors.New("connection refused")))
	require.Empty(t, store.RefusalReason(nil))
}

// Failover and hung-link errors, as a real server and pgx produce them,
// are outages (pause and retry), never a record's rejection: a timeout
// (store.TimedOut tells it from the others: the caller may find the server
// answering and take it for slowness), a read-only primary (25006), a
// terminated session (57P01, what a failover or a restart does to open
// connections), a refused connection, and target_session_attrs refusing a
// server of the wrong role.
func TestFailoverAndTimeoutErrorsAreOutages(t *testing.T) {
	t.Parallel()
	url := testenv.DatabaseURL(t)
	ctx := context.Background()
	fresh := func() *pgx.Conn {
		c, err := pgx.Connect(ctx, url)
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close(ctx) })
		return c
	}
	kinds := map[string]error{}

	// A deadline closes the connection (pgx cannot tell what the server
	// did), so each case gets its own.
	tctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err := fresh().Exec(tctx, "select pg_sleep(5)")
	cancel()
	kinds["statement timed out by the caller"] = err

	conn := fresh()
	_, err = conn.Exec(ctx, "set statement_timeout = '20ms'; select pg_sleep(1)")
	kinds["statement_timeout (57014)"] = err

	tx, err := fresh().Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "set transaction read only")
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "create temporary table t_ro (x int)")
	kinds["read-only transaction (25006)"] = err
	_ = tx.Rollback(ctx)

	victim := fresh()
	_, err = fresh().Exec(ctx, "select pg_terminate_backend($1)", victim.PgConn().PID())
	require.NoError(t, err)
	time.Sleep(100 * time.Millisecond)
	_, err = victim.Exec(ctx, "select 1")
	kinds["session terminated (57P01)"] = err

	cfg, err := pgx.ParseConfig(withParam(url, "target_session_attrs=standby"))
	require.NoError(t, err)
	_, err = pgx.ConnectConfig(ctx, cfg)
	kinds["target_session_attrs refusal"] = err

	_, err = pgx.Connect(ctx, "postgres://x@127.0.0.1:1/x?connect_timeout=2")
	kinds["connection refused"] = err

	for name, err := range kinds {
		require.Error(t, err, name)
		require.Equal(t, store.KindUnavailable, store.Classify(fmt.Errorf("write: %w", err)), "%s: %v", name, err)
		// Only the two timeouts are the bound's, not the server's state.
		timedOut := strings.Contains(name, "timed out") || strings.Contains(name, "statement_timeout")
		require.Equal(t, timedOut, store.TimedOut(fmt.Errorf("write: %w", err)), "%s: %v", name, err)
	}
	var pgErr *pgconn.PgError
	require.ErrorAs(t, kinds["read-only transaction (25006)"], &pgErr)
	require.Equal(t, "25006", pgErr.Code)
}

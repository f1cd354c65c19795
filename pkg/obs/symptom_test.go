package obs

import (
	"context"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pcp/route-processing/pkg/backoff"
	"github.com/pcp/route-processing/pkg/store"
	"github.com/pcp/route-processing/pkg/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// /readyz shows the kind of a database failure, never pgx's message with the
// user, database and host: the errors here are the real ones pgx returns.
func TestDBSymptomHidesConnectionDetails(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dead, err := testenv.FreeAddr()
	require.NoError(t, err)
	live, err := url.Parse(testenv.DatabaseURL(t))
	require.NoError(t, err)
	noDB := *live
	noDB.Path = "/no_such_database_x"
	slow, cancel := context.WithTimeout(ctx, time.Nanosecond)
	defer cancel()

	for _, tc := range []struct {
		name, url string
		ctx       context.Context
		want      string
	}{
		{"refused", "postgres://pcp_user:pw@" + dead + "/pcp_db", ctx, "connection refused"},
		{"no such database", noDB.String(), ctx, "server error, SQLSTATE 3D000"},
		{"timed out", live.String(), slow, "no answer in time"},
	} {
		pool, err := store.Open(ctx, tc.url, "test")
		require.NoError(t, err, tc.name)
		err = pool.Ping(tc.ctx)
		pool.Close()
		require.Error(t, err, tc.name)
		got := DBSymptom(fmt.Errorf("claim outbox batch: %w", err))
		require.Equal(t, tc.want, got, "%s: %v", tc.name, err)
		for _, secret := range []string{"pcp_user", "pcp_db", "no_such_database_x", dead, live.Host} {
			require.NotContains(t, got, secret, tc.name)
		}
	}
	require.Equal(t, "", DBSymptom(nil))
	// A probe that ran out of its wait says how long it waited: the wait
	// grows on a slow link and after misses, and sets how soon an outage
	// shows.
	require.Equal(t, "no answer within 2s", DBSymptom(&backoff.MissError{Wait: 2 * time.Second, Err: context.DeadlineExceeded}))

	// A database nobody migrated: the symptom says what to do.
	pool, err := store.Open(ctx, testenv.EmptyDatabaseURL(t), "test")
	require.NoError(t, err)
	defer pool.Close()
	_, err = pool.Exec(ctx, "select 1 from route_passport_outbox")
	require.Error(t, err)
	require.Equal(t, "schema missing or older than this build (SQLSTATE 42P01): run `ingestor migrate`", DBSymptom(err))
}

package store_test

import (
	"context"
	"runtime"
	"testing"
	"unsafe"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pcp/route-processing/pkg/passport"
	"github.com/pcp/route-processing/pkg/store"
	"github.com/pcp/route-processing/pkg/testenv"
)

// TestWriteLendsTheConnectionsBuffers: writes on one connection encode into
// that connection's kept buffers, the same ones write after write, and a
// smaller write after a larger one, in the same buffers, stores exactly its
// own values. In the default mode a write then allocates far less than its
// parameters' size. In the simple protocol (no reservation: pgx encodes each
// argument apart) nothing is lent and the values are stored all the same.
// Not parallel: it counts the process's allocations.
func TestWriteLendsTheConnectionsBuffers(t *testing.T) {
	ctx := context.Background()
	pool := openPool(ctx, t, testenv.DatabaseURL(t), "pool_max_conns=1")
	s := store.NewPassports(pool, 3)
	kept := func() (send, params []byte) {
		conn, err := pool.Acquire(ctx)
		require.NoError(t, err)
		defer conn.Release()
		return store.KeptBuffers(conn.Conn().PgConn())
	}

	large, small := generatedFrom(t, 11, 500), generatedFrom(t, 12, 200)
	require.NoError(t, s.Write(ctx, large))
	require.NoError(t, s.Write(ctx, small))

	args, err := store.WriteArgs(s, large)
	require.NoError(t, err)
	size, _, reserved := store.Reservation(args[0])
	send, params := kept()
	if !reserved {
		require.Zero(t, cap(send)+cap(params), "nothing lent without a reservation")
	} else {
		require.GreaterOrEqual(t, cap(send), size, "the connection kept its send buffer")
		require.GreaterOrEqual(t, cap(params), size, "the connection kept its parameter buffer")

		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		require.NoError(t, s.Write(ctx, large))
		runtime.ReadMemStats(&after)
		send2, params2 := kept()
		require.Same(t, unsafe.SliceData(send), unsafe.SliceData(send2), "the same send buffer lent again")
		require.Same(t, unsafe.SliceData(params), unsafe.SliceData(params2), "the same parameter buffer lent again")
		if pool.Config().ConnConfig.DefaultQueryExecMode == pgx.QueryExecModeCacheStatement {
			// Unlent, pgx allocated the parameters' size twice over (its
			// parameter buffer and the Bind message): 16.8 MB for these
			// 4.4 MB. The exec mode encodes much of them apart (32.7 MB
			// a write lent, 37.1 unlent).
			require.Less(t, int(after.TotalAlloc-before.TotalAlloc), size/2,
				"a write on kept buffers allocates less than half its parameters' size (%d bytes)", size)
		}
	}

	for _, batch := range [][]passport.Accepted{large, small} {
		for _, a := range batch {
			var same bool
			err := pool.QueryRow(ctx, `select raw_payload = $2::jsonb and geometry_wkt = $3 and route_name_full = $4
				from route_passports where route_id = $1`,
				a.Passport.RouteID, string(a.Source.Value), a.Passport.GeometryWKT, a.Passport.RouteNameFull).Scan(&same)
			require.NoError(t, err, "route %s", a.Passport.RouteID)
			require.True(t, same, "route %s stored as written", a.Passport.RouteID)
			for _, e := range a.Events {
				err := pool.QueryRow(ctx, `select payload = $3::jsonb from route_passport_outbox where route_id = $1 and event_type = $2`,
					a.Passport.RouteID, e.Type, string(e.Payload)).Scan(&same)
				require.NoError(t, err, "route %s %s", a.Passport.RouteID, e.Type)
				require.True(t, same, "route %s: %s event stored as written", a.Passport.RouteID, e.Type)
			}
		}
	}
}

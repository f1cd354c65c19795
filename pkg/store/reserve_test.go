package store_test

import (
	"context"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pcp/route-processing/pkg/passport"
	"github.com/pcp/route-processing/pkg/passportgen"
	"github.com/pcp/route-processing/pkg/record"
	"github.com/pcp/route-processing/pkg/store"
	"github.com/pcp/route-processing/pkg/testenv"
)

// generated returns n accepted passports of passportgen's realistic kind.
func generated(t testing.TB, n int) []passport.Accepted {
	t.Helper()
	return generatedFrom(t, 7, n)
}

// generatedFrom is generated with passportgen's seed.
func generatedFrom(t testing.TB, seed uint64, n int) []passport.Accepted {
	t.Helper()
	rng := passportgen.NewRand(seed)
	out := make([]passport.Accepted, n)
	for i := range out {
		r := passportgen.Valid(rng)
		p, err := passport.Parse(r.Value, passport.Limits{})
		require.NoError(t, err)
		out[i] = passport.Accept(p, record.Record{Topic: "pcp.request.survey-georeference.v1", Offset: int64(i), Key: r.Key, Value: r.Value}, events)
	}
	return out
}

// writeStatement returns a pool, the write's parameter types as the server
// describes them, and a pool connection's type map (which [store.Open] gave
// the reservation hook).
func writeStatement(t testing.TB) (*pgxpool.Pool, *pgconn.StatementDescription, *pgtype.Map) {
	t.Helper()
	ctx := context.Background()
	pool := testenv.Pool(t)
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	t.Cleanup(conn.Release)
	sd, err := conn.Conn().Prepare(ctx, "", store.WriteSQL)
	require.NoError(t, err)
	return pool, sd, conn.Conn().TypeMap()
}

func encode(t testing.TB, m *pgtype.Map, sd *pgconn.StatementDescription, args []any) [][]byte {
	t.Helper()
	var eqb pgx.ExtendedQueryBuilder
	require.NoError(t, eqb.Build(m, sd, args))
	return eqb.ParamValues
}

// TestWriteReservesItsParameters: the write's first argument makes room for
// all the parameters, which are encoded to the same bytes as without it,
// also by a type map that lacks the hook.
func TestWriteReservesItsParameters(t *testing.T) {
	t.Parallel()
	pool, sd, hooked := writeStatement(t)
	args, err := store.WriteArgs(store.NewPassports(pool, 3), generated(t, 200))
	require.NoError(t, err)
	size, value, ok := store.Reservation(args[0])
	if pool.Config().ConnConfig.DefaultQueryExecMode == pgx.QueryExecModeSimpleProtocol {
		require.False(t, ok, "no reservation in the simple protocol, where pgx encodes each argument apart")
		return
	}
	require.True(t, ok, "the first argument carries the reservation")
	plain := slices.Clone(args)
	plain[0] = value

	want := encode(t, pgtype.NewMap(), sd, plain)
	total := 0
	for _, v := range want {
		total += len(v)
	}
	require.GreaterOrEqual(t, size, total, "the estimate covers the parameters")
	require.LessOrEqual(t, size, total*3/2, "the estimate is not far above them")

	got := encode(t, hooked, sd, args)
	require.Equal(t, want, got)
	require.GreaterOrEqual(t, cap(got[0]), total, "the hook reserved the room in pgx's buffer")

	require.Equal(t, want, encode(t, pgtype.NewMap(), sd, args), "a map without the hook encodes the value as it is")
}

// BenchmarkWriteArgs encodes the write of 500 passports as pgx does, with
// and without the reservation.
//
//	go test ./pkg/store -run '^$' -bench WriteArgs
func BenchmarkWriteArgs(b *testing.B) {
	pool, sd, hooked := writeStatement(b)
	args, err := store.WriteArgs(store.NewPassports(pool, 3), generated(b, 500))
	require.NoError(b, err)
	_, value, ok := store.Reservation(args[0])
	require.True(b, ok, "run in the default query exec mode")
	plain := slices.Clone(args)
	plain[0] = value
	for _, bc := range []struct {
		name string
		args []any
	}{{"reserved", args}, {"unreserved", plain}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			var eqb pgx.ExtendedQueryBuilder
			for range b.N {
				if err := eqb.Build(hooked, sd, bc.args); err != nil {
					b.Fatal(err)
				}
				// pgx's next query drops the buffer.
				if err := eqb.Build(hooked, &pgconn.StatementDescription{}, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestUnencodableRouteIDIsTheRecords: a route id the write cannot encode
// (validation lets none through; a hand-built passport can) is the
// record's refusal, which the ingestor dead-letters, not an outage it
// would wait out for ever.
func TestUnencodableRouteIDIsTheRecords(t *testing.T) {
	t.Parallel()
	acc := generated(t, 2)
	acc[1].Passport.RouteID = "not-a-uuid"
	err := store.NewPassports(testenv.Pool(t), 3).Write(context.Background(), acc)
	require.Error(t, err)
	require.Equal(t, store.KindRecord, store.Classify(err), "%v", err)
	require.Contains(t, store.RefusalReason(err), "encode route id of offset 1")
}

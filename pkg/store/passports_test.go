package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pcp/route-processing/pkg/passport"
	"github.com/pcp/route-processing/pkg/record"
	"github.com/pcp/route-processing/pkg/store"
	"github.com/pcp/route-processing/pkg/testenv"
)

var events = passport.EventConfig{TopicProcessedRoute: "proc", TopicRouteGeoreference: "geo", MessageKey: "traceId"}

// passportRecord is an accepted record of the route; headers are the
// input record's.
func passportRecord(t *testing.T, routeID, name, traceID string, offset int64, headers ...record.Header) passport.Accepted {
	t.Helper()
	raw, err := os.ReadFile("../../testdata/contract/valid-polygon.json")
	require.NoError(t, err)
	var doc map[string]any
	require.NoError(t, json.Unmarshal(raw, &doc))
	props := doc["data"].(map[string]any)["properties"].(map[string]any)
	props["pcp:route_id"] = routeID
	props["pcp:route_name_full"] = name
	doc["traceId"] = traceID
	v, err := json.Marshal(doc)
	require.NoError(t, err)
	p, err := passport.Parse(v, passport.Limits{})
	require.NoError(t, err)
	return passport.Accept(p, record.Record{Topic: "in", Partition: 0, Offset: offset, Key: []byte("k"), Value: v, Headers: headers}, events)
}

func TestPassportsWrite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("SameRouteTwiceInOneWrite", func(t *testing.T) {
		t.Parallel()
		pool := testenv.Pool(t)
		s := store.NewPassports(pool, 7)
		id := uuid.NewString()
		tp := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
		first := passportRecord(t, id, "first", "trace-1", 1, record.Header{Key: "traceparent", Value: []byte(tp)})
		last := passportRecord(t, id, "last", "trace-2", 2)
		require.NoError(t, s.Write(ctx, []passport.Accepted{first, last}))

		var name string
		var off int64
		require.NoError(t, pool.QueryRow(ctx, "select route_name_full, source_offset from route_passports where route_id = $1", id).Scan(&name, &off))
		require.Equal(t, "last", name, "the last record wins the row")
		require.Equal(t, int64(2), off)

		rows, err := pool.Query(ctx, "select event_type, topic, message_key, headers, max_attempts, payload = $2::jsonb or payload = $3::jsonb from route_passport_outbox where route_id = $1 order by event_type",
			id, string(first.Passport.Payload(passport.EventModeStatusChanged)), string(first.Passport.Payload(passport.EventRouteGeoRef)))
		require.NoError(t, err)
		defer rows.Close()
		n := 0
		for rows.Next() {
			var typ, topic, key string
			var headers map[string]string
			var maxAttempts int
			var payloadOfFirst bool
			require.NoError(t, rows.Scan(&typ, &topic, &key, &headers, &maxAttempts, &payloadOfFirst))
			require.True(t, payloadOfFirst, "the first record freezes the events")
			require.Equal(t, "trace-1", key)
			require.Equal(t, 7, maxAttempts)
			require.Equal(t, typ, headers["type"])
			require.Equal(t, "trace-1", headers["traceId"])
			require.Equal(t, tp, headers["traceparent"])
			require.NotEmpty(t, headers["eventId"])
			want := map[string]string{passport.EventModeStatusChanged: "proc", passport.EventRouteGeoRef: "geo"}[typ]
			require.Equal(t, want, topic)
			n++
		}
		require.Equal(t, 2, n)
	})

	t.Run("EachEventStoresItsOwnPayload", func(t *testing.T) {
		t.Parallel()
		pool := testenv.Pool(t)
		s := store.NewPassports(pool, 7)
		var batch []passport.Accepted
		for i := 0; i < 3; i++ {
			batch = append(batch, passportRecord(t, uuid.NewString(), fmt.Sprintf("route %d", i), "trace", int64(i)))
		}
		// Events that are not one document under two types are stored as
		// they are, type included.
		odd := passportRecord(t, uuid.NewString(), "odd", "trace", 9)
		odd.Events[0].Payload = []byte(`{"type":"SomethingElse","data":{"n":1}}`)
		odd.Events[1].Payload = []byte(`{"data":{"n":2},"type":"` + odd.Events[1].Type + `"}`)
		batch = append(batch, odd)
		require.NoError(t, s.Write(ctx, batch))
		for _, acc := range batch {
			for _, ev := range acc.Events {
				var same bool
				var stored string
				require.NoError(t, pool.QueryRow(ctx, "select payload = $2::jsonb, payload::text from route_passport_outbox where id = $1",
					ev.ID, string(ev.Payload)).Scan(&same, &stored))
				require.True(t, same, "event %s of %s: stored %s, want %s", ev.Type, acc.Passport.RouteID, stored, ev.Payload)
			}
		}
	})

	t.Run("NulRejectedAsRecord", func(t *testing.T) {
		t.Parallel()
		pool := testenv.Pool(t)
		s := store.NewPassports(pool, 7)
		rec := passportRecord(t, uuid.NewString(), "nul", "t", 1)
		rec.Source.Value = []byte(strings.Replace(string(rec.Source.Value), `"source":"survey-planner"`, `"source":"a\u0000b"`, 1))
		err := s.Write(ctx, []passport.Accepted{rec})
		require.Error(t, err)
		require.Equal(t, store.KindRecord, store.Classify(err))
	})
}

// A pipelined writer may update a route in a transaction that began before
// the one that inserted it; updated_at must still not precede created_at.
func TestPassportsUpdatedAtAfterInsertOfLaterTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testenv.Pool(t)
	s := store.NewPassports(pool, 3)
	id := uuid.NewString()

	older, err := s.Begin(ctx) // begins first, writes last
	require.NoError(t, err)
	defer func() { _ = older.Rollback(ctx) }()
	// now() of older is its BEGIN time, before the insert below.
	time.Sleep(20 * time.Millisecond)

	require.NoError(t, s.Write(ctx, []passport.Accepted{passportRecord(t, id, "insert", "t1", 1)}))
	var created1, updated1 time.Time
	require.NoError(t, pool.QueryRow(ctx, "select created_at, updated_at from route_passports where route_id = $1", id).Scan(&created1, &updated1))
	require.Equal(t, created1, updated1, "an insert sets both to the same time")

	time.Sleep(20 * time.Millisecond)
	require.NoError(t, older.Write(ctx, []passport.Accepted{passportRecord(t, id, "update", "t2", 2)}))
	require.NoError(t, older.Commit(ctx))

	var name string
	var created2, updated2 time.Time
	require.NoError(t, pool.QueryRow(ctx, "select route_name_full, created_at, updated_at from route_passports where route_id = $1", id).Scan(&name, &created2, &updated2))
	require.Equal(t, "update", name)
	require.Equal(t, created1, created2, "created_at is kept")
	require.True(t, updated2.After(created2), "updated_at %s moves past created_at %s", updated2, created2)
}

func TestOpenSetsConnectTimeout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, err := store.Open(ctx, "postgres://u@127.0.0.1:1/db?sslmode=disable", "test")
	require.NoError(t, err)
	defer pool.Close()
	require.Equal(t, store.DefaultConnectTimeout, pool.Config().ConnConfig.ConnectTimeout)

	pool2, err := store.Open(ctx, "postgres://u@127.0.0.1:1/db?sslmode=disable&connect_timeout=3", "test")
	require.NoError(t, err)
	defer pool2.Close()
	require.Equal(t, 3*time.Second, pool2.Config().ConnConfig.ConnectTimeout, "the URL's value wins")
}

package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync/atomic"
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

// bothWrites are the two ways of writing one passport, by name: Write, and
// BeginWrite followed by Commit.
func bothWrites(ctx context.Context, s *store.Passports) map[string]func(passport.Accepted) error {
	return map[string]func(passport.Accepted) error{
		"Write": func(acc passport.Accepted) error { return s.Write(ctx, []passport.Accepted{acc}) },
		"BeginWrite": func(acc passport.Accepted) error {
			tx, err := s.BeginWrite(ctx, []passport.Accepted{acc}, 0)
			if err != nil {
				return err
			}
			return tx.Commit(ctx)
		},
	}
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

	// A write of a partition's former owner, held up past the revocation,
	// commits after the new owner wrote the route's next record: the older
	// record (lower offset of the same topic and partition, produced
	// before the row was written) does not undo it, and is reported as
	// kept out. Everything else still replaces the row: a later record
	// produced before the row was written (a consumer lagging behind), the
	// same record again (a redelivery), another partition's or another
	// topic's record, one without a timestamp, and a recreated topic's
	// (a lower offset produced after the row was written).
	t.Run("AnOlderRecordOfThePartitionKeepsTheLaterVersion", func(t *testing.T) {
		t.Parallel()
		pool := testenv.Pool(t)
		s := store.NewPassports(pool, 7)
		var keptOut atomic.Int64
		s.KeptOut = func(_ context.Context, n int64) { keptOut.Add(n) }
		for name, write := range bothWrites(ctx, s) {
			id := uuid.NewString()
			at := func(rowName, topic string, partition int32, offset int64, ts time.Time) passport.Accepted {
				acc := passportRecord(t, id, rowName, "trace", offset)
				acc.Source.Topic, acc.Source.Partition, acc.Source.Timestamp = topic, partition, ts
				return acc
			}
			wins := func(rowName string, offset int64, why string) {
				t.Helper()
				var n string
				var off int64
				require.NoError(t, pool.QueryRow(ctx, "select route_name_full, source_offset from route_passports where route_id = $1", id).Scan(&n, &off))
				require.Equal(t, rowName, n, "%s: %s", name, why)
				require.Equal(t, offset, off, "%s: %s", name, why)
			}
			produced := time.Now().Add(-30 * time.Second) // every record below but the last was produced before any write
			keptOut.Store(0)

			require.NoError(t, write(at("v1", "in", 0, 10, produced)), name)
			require.NoError(t, write(at("v2", "in", 0, 11, produced.Add(time.Second))), name)
			wins("v2", 11, "a later record produced before the row was written replaces it (a lagging consumer)")
			require.NoError(t, write(at("v1", "in", 0, 10, produced)), name)
			wins("v2", 11, "the older record of the partition, late, keeps the later version")
			require.EqualValues(t, 1, keptOut.Load(), "%s: the kept-out record is reported", name)
			require.NoError(t, write(at("v2 again", "in", 0, 11, produced.Add(time.Second))), name)
			wins("v2 again", 11, "the same record again (a redelivery) replaces the row")

			require.NoError(t, write(at("other partition", "in", 1, 3, produced)), name)
			wins("other partition", 3, "offsets of another partition are not compared")
			require.NoError(t, write(at("other topic", "mirror", 1, 2, produced)), name)
			wins("other topic", 2, "offsets of another topic are not compared")
			require.NoError(t, write(at("v3", "mirror", 1, 5, time.Time{})), name)
			require.NoError(t, write(at("untimed", "mirror", 1, 4, time.Time{})), name)
			wins("untimed", 4, "a record without a timestamp replaces the row")

			time.Sleep(10 * time.Millisecond) // a new topic's records come after the row's write
			require.NoError(t, write(at("recreated topic", "mirror", 1, 0, time.Now())), name)
			wins("recreated topic", 0, "a lower offset produced after the row was written replaces it")
			require.EqualValues(t, 1, keptOut.Load(), "%s: nothing else was kept out", name)

			var events int
			require.NoError(t, pool.QueryRow(ctx, "select count(*) from route_passport_outbox where route_id = $1", id).Scan(&events))
			require.Equal(t, 2, events, "%s: the first record's events only", name)
		}
	})

	// Contract §1.5: the same routeId again (a redelivery, a replay, an
	// update) changes the row in place and writes no new outbox rows, also
	// after retention deleted the first events (a replay a day later must
	// not publish them again under new event ids).
	t.Run("SameRouteAgainAfterRetentionGetsNoNewEvents", func(t *testing.T) {
		t.Parallel()
		pool := testenv.Pool(t)
		s := store.NewPassports(pool, 7)
		id := uuid.NewString()
		require.NoError(t, s.Write(ctx, []passport.Accepted{passportRecord(t, id, "first", "trace-1", 1)}))
		count := func() (n int) {
			require.NoError(t, pool.QueryRow(ctx, "select count(*) from route_passport_outbox where route_id = $1", id).Scan(&n))
			return n
		}
		require.Equal(t, 2, count())

		require.NoError(t, s.Write(ctx, []passport.Accepted{passportRecord(t, id, "again", "trace-2", 2)}))
		require.Equal(t, 2, count(), "redelivery while the first events are in the outbox")

		_, err := pool.Exec(ctx, "delete from route_passport_outbox where route_id = $1", id) // as retention does
		require.NoError(t, err)
		other := uuid.NewString()
		require.NoError(t, s.Write(ctx, []passport.Accepted{passportRecord(t, id, "replayed", "trace-3", 3), passportRecord(t, other, "new", "trace-4", 4)}))
		require.Equal(t, 0, count(), "a replay after retention")
		var name string
		require.NoError(t, pool.QueryRow(ctx, "select route_name_full from route_passports where route_id = $1", id).Scan(&name))
		require.Equal(t, "replayed", name, "the row is updated in place")
		var n int
		require.NoError(t, pool.QueryRow(ctx, "select count(*) from route_passport_outbox where route_id = $1", other).Scan(&n))
		require.Equal(t, 2, n, "a new route in the same write gets its events")
	})

	// A traceparent header jsonb cannot hold (a NUL, invalid UTF-8) made
	// the database refuse a valid passport, which went to the DLQ: the
	// events now leave it out, and the passport is written.
	t.Run("UnstorableTraceparentLeftOut", func(t *testing.T) {
		t.Parallel()
		pool := testenv.Pool(t)
		s := store.NewPassports(pool, 7)
		for _, v := range []string{"00-4bf9\x00", "00-\xff\xfe-01"} {
			id := uuid.NewString()
			rec := passportRecord(t, id, "odd header", "t", 1, record.Header{Key: "traceparent", Value: []byte(v)})
			require.NoError(t, s.Write(ctx, []passport.Accepted{rec}), "%q", v)
			var n, with int
			require.NoError(t, pool.QueryRow(ctx, "select count(*), count(*) filter (where headers ? 'traceparent') from route_passport_outbox where route_id = $1", id).Scan(&n, &with))
			require.Equal(t, 2, n, "%q", v)
			require.Zero(t, with, "%q", v)
		}
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

	// Escapes that jsonb refuses, in a member the passport ignores: the
	// contract accepts the record, and raw_payload stores it with each
	// replaced by U+FFFD. Before 2026-12-07 the write failed (22P05 and
	// 22P02) and the passport was dead-lettered.
	t.Run("UnstorableEscapeStoredReplaced", func(t *testing.T) {
		t.Parallel()
		pool := testenv.Pool(t)
		s := store.NewPassports(pool, 7)
		for _, esc := range []string{`\u0000`, `\ud800`, `\udc00`} {
			for name, write := range bothWrites(ctx, s) {
				rec := passportRecord(t, uuid.NewString(), "escape", "t", 1)
				value := strings.Replace(string(rec.Source.Value), `"source":"survey-planner"`, `"source":"a`+esc+`b"`, 1)
				require.NotEqual(t, string(rec.Source.Value), value)
				rec.Source.Value = []byte(value)
				_, err := passport.Parse(rec.Source.Value, passport.DefaultLimits())
				require.NoError(t, err, "%s in an ignored member is valid by contract", esc)
				require.NoError(t, write(rec), "%s, %s", esc, name)
				var source string
				var events int
				require.NoError(t, pool.QueryRow(ctx, `select raw_payload->>'source',
					(select count(*) from route_passport_outbox o where o.route_id = p.route_id)
					from route_passports p where route_id = $1`, rec.Passport.RouteID).Scan(&source, &events))
				require.Equal(t, "a\uFFFDb", source, "%s, %s", esc, name)
				require.Equal(t, 2, events, "%s, %s", esc, name)
			}
		}
	})
}

// A pipelined writer's later batch may run its statements while the batch
// that inserts the route has not committed yet: it waits for that commit,
// then updates the route, and updated_at must not precede created_at.
func TestPassportsBeginWriteQueuesBehindUncommittedInsert(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testenv.Pool(t)
	s := store.NewPassports(pool, 3)
	id := uuid.NewString()

	first, err := s.BeginWrite(ctx, []passport.Accepted{passportRecord(t, id, "insert", "t1", 1)}, 0)
	require.NoError(t, err)
	defer func() { _ = first.Rollback(ctx) }()

	second := make(chan error, 1)
	go func() {
		tx, err := s.BeginWrite(ctx, []passport.Accepted{passportRecord(t, id, "update", "t2", 2)}, 0)
		if err == nil {
			err = tx.Commit(ctx)
		}
		second <- err
	}()
	select {
	case err := <-second:
		t.Fatalf("the second write finished (%v) while the insert of its route was not committed", err)
	case <-time.After(200 * time.Millisecond):
	}
	require.NoError(t, first.Commit(ctx))
	select {
	case err := <-second:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the second write did not finish after the insert committed")
	}

	var name string
	var created, updated time.Time
	require.NoError(t, pool.QueryRow(ctx, "select route_name_full, created_at, updated_at from route_passports where route_id = $1", id).Scan(&name, &created, &updated))
	require.Equal(t, "update", name)
	require.True(t, updated.After(created), "updated_at %s moves past created_at %s", updated, created)
	var outbox int
	require.NoError(t, pool.QueryRow(ctx, "select count(*) from route_passport_outbox where route_id = $1", id).Scan(&outbox))
	require.Equal(t, 2, outbox, "the outbox rows are the first record's, once")
}

// A transaction left idle past maxIdle (its writer frozen, or its node
// gone) is ended by the server, so another writer of the same route stops
// waiting for its row lock; the bound is the transaction's own and does
// not stay with the pooled connection.
func TestPassportsHeldWriteEndsWhenLeftIdle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testenv.Pool(t)
	s := store.NewPassports(pool, 3)
	id := uuid.NewString()

	abandoned, err := s.BeginWrite(ctx, []passport.Accepted{passportRecord(t, id, "abandoned", "t1", 1)}, 300*time.Millisecond)
	require.NoError(t, err)
	defer func() { _ = abandoned.Rollback(ctx) }() // the pool's close waits for its connection
	start := time.Now()
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, s.Write(wctx, []passport.Accepted{passportRecord(t, id, "next", "t2", 2)}), "the write behind the abandoned one")
	waited := time.Since(start)
	require.Less(t, waited, 5*time.Second, "the abandoned transaction ended after about its bound")
	t.Logf("figures: the write behind a transaction idle for 300 ms waited %s", waited.Round(time.Millisecond))
	require.Error(t, abandoned.Commit(ctx), "the abandoned transaction's session was ended")

	var name string
	require.NoError(t, pool.QueryRow(ctx, "select route_name_full from route_passports where route_id = $1", id).Scan(&name))
	require.Equal(t, "next", name)

	kept, err := s.BeginWrite(ctx, []passport.Accepted{passportRecord(t, uuid.NewString(), "kept", "t3", 3)}, 300*time.Millisecond)
	require.NoError(t, err)
	require.NoError(t, kept.Commit(ctx))
	conns := pool.AcquireAllIdle(ctx)
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	for _, c := range conns {
		var setting string
		require.NoError(t, c.QueryRow(ctx, "show idle_in_transaction_session_timeout").Scan(&setting))
		require.Equal(t, "0", setting, "no pooled connection keeps the bound")
	}
}

// An operator's stricter idle_in_transaction_session_timeout stays: the
// bound only tightens it.
func TestPassportsHeldWriteKeepsAStricterSetting(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testenv.Pool(t)
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	check := func(session string, maxIdle time.Duration, want string) {
		t.Helper()
		_, err := conn.Exec(ctx, "select set_config('idle_in_transaction_session_timeout', $1, false)", session)
		require.NoError(t, err)
		tx, err := conn.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		_, err = tx.Exec(ctx, store.IdleBoundSQL, maxIdle.Milliseconds())
		require.NoError(t, err)
		var got string
		require.NoError(t, tx.QueryRow(ctx, "show idle_in_transaction_session_timeout").Scan(&got))
		require.Equal(t, want, got, "session %s, bound %s", session, maxIdle)
	}
	check("0", 8*time.Second, "8s")
	check("1min", 8*time.Second, "8s")
	check("500ms", 8*time.Second, "500ms")
	check("8s", 8*time.Second, "8s")
	check("8001ms", 8*time.Second, "8s")
}

// Write is one transaction: a statement that fails leaves nothing of the
// others behind.
func TestPassportsWriteIsAtomic(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testenv.Pool(t)
	s := store.NewPassports(pool, 3)
	good := uuid.NewString()
	ok := passportRecord(t, good, "good", "t1", 1)
	broken := passportRecord(t, good, "good", "t1", 1)
	// The upsert runs; the outbox insert then fails on the server (two
	// events under one id).
	broken.Events = slices.Clone(broken.Events)
	broken.Events[1].ID = broken.Events[0].ID

	err := s.Write(ctx, []passport.Accepted{broken})
	require.ErrorContains(t, err, "route_passport_outbox_pkey")
	var n int
	require.NoError(t, pool.QueryRow(ctx, "select count(*) from route_passports where route_id = $1", good).Scan(&n))
	require.Zero(t, n, "the passport upserted by the failed write is not kept")
	require.NoError(t, pool.QueryRow(ctx, "select count(*) from route_passport_outbox where route_id = $1", good).Scan(&n))
	require.Zero(t, n, "no outbox row of the failed write is kept")

	require.NoError(t, s.Write(ctx, []passport.Accepted{ok}))
	require.NoError(t, pool.QueryRow(ctx, "select count(*) from route_passports where route_id = $1", good).Scan(&n))
	require.Equal(t, 1, n, "the connection is usable after the failed write")
}

// A write the server rejects leaves its connection in the pool: its failed
// transaction is rolled back, so the next write needs no new connection
// (before 2026-12-07 the pool closed it, and with it the write buffers it
// kept).
func TestPassportsFailedWriteKeepsItsConnection(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := openPool(ctx, t, testenv.DatabaseURL(t), "pool_max_conns=1")
	s := store.NewPassports(pool, 3)
	backend := func() (pid int32) {
		require.NoError(t, pool.QueryRow(ctx, "select pg_backend_pid()").Scan(&pid))
		return pid
	}
	first := backend()
	broken := passportRecord(t, uuid.NewString(), "broken", "t1", 1)
	broken.Events = slices.Clone(broken.Events)
	broken.Events[1].ID = broken.Events[0].ID // the outbox insert fails on the server

	require.ErrorContains(t, s.Write(ctx, []passport.Accepted{broken}), "route_passport_outbox_pkey")
	require.Equal(t, first, backend(), "the same connection after the failed write")
	require.EqualValues(t, 1, pool.Stat().NewConnsCount(), "no new connection")
	require.NoError(t, s.Write(ctx, []passport.Accepted{passportRecord(t, uuid.NewString(), "good", "t1", 2)}))
	require.Equal(t, first, backend())
}

// A session the database refused as a whole (here: read-only) is not kept
// after the failed write: once the setting is reset, the next write gets a
// new, writable session, although nobody ended the old one.
func TestPassportsWriteAfterReadOnlyGetsANewSession(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testenv.DatabaseURL(t)
	pool := openPool(ctx, t, url, "pool_max_conns=1")
	s := store.NewPassports(pool, 3)
	setReadOnlyDefault(t, url, "on")
	t.Cleanup(func() { setReadOnlyDefault(t, url, "off") })
	// The pool's one session ends, and the next is read-only.
	_, err := pool.Exec(ctx, "select pg_terminate_backend(pg_backend_pid())")
	require.Error(t, err)
	err = s.Write(ctx, []passport.Accepted{passportRecord(t, uuid.NewString(), "ro", "t1", 1)})
	require.ErrorContains(t, err, "25006")
	require.Equal(t, store.KindUnavailable, store.Classify(err))

	// Writable again for new sessions only; the read-only one is not ended.
	setReadOnlyDefault(t, url, "off")
	require.NoError(t, s.Write(ctx, []passport.Accepted{passportRecord(t, uuid.NewString(), "rw", "t1", 2)}))
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

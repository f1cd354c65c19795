package main

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pcp/route-processing/pkg/e2e"
	"github.com/pcp/route-processing/pkg/passport"
	"github.com/pcp/route-processing/pkg/store"
	"github.com/pcp/route-processing/pkg/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// The ingest ceiling must write what the service writes, or it bounds
// other work: the same passports through store's write and through the
// ceiling's COPY path give the same rows, column for column (ids and times
// aside), compressed the same way.
func TestIngestCeilingWritesTheServiceRows(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ev := passport.EventConfig{TopicProcessedRoute: topicOut1, TopicRouteGeoreference: topicOut2, MessageKey: passport.KeyTraceID}
	const maxAttempts = 10
	recs := e2e.GenValid(7, 120)

	svcURL, ceilURL := testenv.DatabaseURL(t), testenv.DatabaseURL(t)
	pool, err := store.Open(ctx, svcURL, "test")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	in := make([]passport.Accepted, len(recs))
	for i := range recs {
		acc, err := acceptRecord(i, recs[i], ev)
		if err != nil {
			t.Fatal(err)
		}
		in[i] = acc
	}
	if err := store.NewPassports(pool, maxAttempts).Write(ctx, in); err != nil {
		t.Fatalf("service write: %v", err)
	}

	conn, err := pgx.Connect(ctx, ceilURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, ceilingTempTablesSQL); err != nil {
		t.Fatalf("temporary tables: %v", err)
	}
	for lo := 0; lo < len(recs); lo += 50 { // three transactions
		ch, err := buildCeilingChunk(recs, lo, min(lo+50, len(recs)), ev)
		if err != nil {
			t.Fatal(err)
		}
		if err := writeCeilingChunk(ctx, conn, ch, maxAttempts); err != nil {
			t.Fatalf("ceiling write: %v", err)
		}
	}

	queries := map[string]string{
		"passports": `select count(*), jsonb_agg(to_jsonb(p) - 'created_at' - 'updated_at' order by route_id)::text
			from route_passports p`,
		"outbox rows": `select count(*), jsonb_agg(to_jsonb(o) - 'id' - 'created_at' - 'updated_at' - 'next_attempt_at' - 'headers'
			|| jsonb_build_object('headers', headers - 'eventId', 'event_id_is_id', headers->>'eventId' = id::text)
			order by route_id, event_type)::text from route_passport_outbox o`,
		"compression": `select count(*), string_agg(coalesce(pg_column_compression(p.raw_payload), '-') || coalesce(pg_column_compression(o.payload), '-'), '' order by route_id, o.event_type)
			from route_passports p join route_passport_outbox o using (route_id)`,
	}
	for name, q := range queries {
		var nSvc, nCeil int
		var svc, ceil string
		if err := pool.QueryRow(ctx, q).Scan(&nSvc, &svc); err != nil {
			t.Fatalf("%s (service): %v", name, err)
		}
		if err := conn.QueryRow(ctx, q).Scan(&nCeil, &ceil); err != nil {
			t.Fatalf("%s (ceiling): %v", name, err)
		}
		if nSvc == 0 || nSvc != nCeil || svc != ceil {
			t.Errorf("%s differ: service %d rows, ceiling %d rows\nservice: %.600s\nceiling: %.600s", name, nSvc, nCeil, svc, ceil)
		}
	}
}

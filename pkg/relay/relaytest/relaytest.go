// Package relaytest writes outbox rows the way the ingestor's chained write
// does (a route_passports parent row, then its outbox rows, then a NOTIFY,
// in one transaction; the ingestor's usual write notifies after its
// commit, in a transaction of its own), for the tests and benchmarks of the
// relay and the store.
package relaytest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pcp/route-processing/pkg/outbox"
	"github.com/pcp/route-processing/pkg/passport"
	"github.com/pcp/route-processing/pkg/store"
)

// Event types (contract §2), as the ingestor writes them.
const (
	ModeStatusChanged = passport.EventModeStatusChanged
	RouteGeoRef       = passport.EventRouteGeoRef
)

// DefaultMaxAttempts is the max_attempts of rows Insert and Seed write:
// the relay's default.
const DefaultMaxAttempts = outbox.DefaultMaxAttempts

const insertPassportSQL = `
insert into route_passports (
    route_id, route_name_full, route_name_short, ka_short, ka_full, orbit_number, orbit_state,
    interval_begin, interval_end, roll_angle_min, roll_angle_max, visir_angle_min, visir_angle_max,
    resolution_range, resolution_azimuth, polarisation, processing_level, geometry_wkt, route_status,
    source_topic, source_partition, source_offset, raw_payload)
select r, 'KA-7 route ' || r::text, 'R', 'KA-7', 'Kondor-FKA No. 7', 1, 'descending',
    now(), now(), -1, 1, 1, 2, 3, 2.5, '["HH"]', 'L1', 'POLYGON((30 10,40 40,20 40,10 20,30 10))',
    'PROCESSED', 'relaytest-' || r::text, 0, 0, '{}'
from unnest($1::uuid[]) as r
on conflict (route_id) do nothing`

const insertOutboxSQL = `
insert into route_passport_outbox (id, route_id, event_type, topic, message_key, payload, headers, max_attempts)
select * from unnest($1::uuid[], $2::uuid[], $3::text[], $4::text[], $5::text[], $6::jsonb[], $7::jsonb[], $8::int[])`

// Fill returns e with its defaults filled in: a new ID, a new route, key =
// route id, a small JSON payload naming the event type, headers type and
// eventId.
func Fill(e outbox.Event) outbox.Event {
	if e.ID == uuid.Nil {
		e.ID = uuid.New()
	}
	if e.RouteID == "" {
		e.RouteID = uuid.NewString()
	}
	if e.Type == "" {
		e.Type = RouteGeoRef
	}
	if e.Key == "" {
		e.Key = e.RouteID
	}
	if e.Payload == nil {
		e.Payload, _ = json.Marshal(map[string]any{"type": e.Type, "data": map[string]any{"routeId": e.RouteID}})
	}
	if e.Headers == nil {
		e.Headers = outbox.OrderHeaders(map[string]string{outbox.HeaderType: e.Type, outbox.HeaderEventID: e.ID.String()})
	}
	return e
}

// Insert writes events (with their parent passports, max_attempts
// DefaultMaxAttempts) and a NOTIFY in one transaction, like the ingestor's
// chained write, and returns them with defaults filled in.
func Insert(ctx context.Context, pool *pgxpool.Pool, events ...outbox.Event) ([]outbox.Event, error) {
	return InsertMaxAttempts(ctx, pool, DefaultMaxAttempts, events...)
}

// InsertMaxAttempts is Insert with the rows' max_attempts.
func InsertMaxAttempts(ctx context.Context, pool *pgxpool.Pool, maxAttempts int, events ...outbox.Event) ([]outbox.Event, error) {
	n := len(events)
	ids, routes := make([]pgtype.UUID, n), make([]pgtype.UUID, n)
	types, topics, keys := make([]string, n), make([]string, n), make([]string, n)
	payloads, headers := make([]string, n), make([]string, n)
	maxes := make([]int32, n)
	for i := range events {
		events[i] = Fill(events[i])
		e := events[i]
		route, err := uuid.Parse(e.RouteID)
		if err != nil {
			return nil, fmt.Errorf("route id of event %s: %w", e.ID, err)
		}
		ids[i], routes[i] = pgtype.UUID{Bytes: e.ID, Valid: true}, pgtype.UUID{Bytes: route, Valid: true}
		types[i], topics[i], keys[i] = e.Type, e.Topic, e.Key
		payloads[i], headers[i], maxes[i] = string(e.Payload), string(outbox.HeadersJSON(e.Headers)), int32(maxAttempts)
	}
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, insertPassportSQL, routes); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, insertOutboxSQL, ids, routes, types, topics, keys, payloads, headers, maxes); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `select pg_notify($1, '')`, store.NotifyChannel)
		return err
	})
	return events, err
}

// MustInsert is Insert that fails t.
func MustInsert(t testing.TB, pool *pgxpool.Pool, events ...outbox.Event) []outbox.Event {
	t.Helper()
	return MustInsertMaxAttempts(t, pool, DefaultMaxAttempts, events...)
}

// MustInsertMaxAttempts is InsertMaxAttempts that fails t.
func MustInsertMaxAttempts(t testing.TB, pool *pgxpool.Pool, maxAttempts int, events ...outbox.Event) []outbox.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := InsertMaxAttempts(ctx, pool, maxAttempts, events...)
	if err != nil {
		t.Fatalf("relaytest: insert outbox rows: %v", err)
	}
	return out
}

// SeedSQL inserts $1 passports with two outbox rows each (topics $2 and $3,
// headers type and eventId, max_attempts $4) in one statement, without a
// NOTIFY.
const SeedSQL = `
with p as (
    insert into route_passports (
        route_id, route_name_full, route_name_short, ka_short, ka_full, orbit_number, orbit_state,
        interval_begin, interval_end, roll_angle_min, roll_angle_max, visir_angle_min, visir_angle_max,
        resolution_range, resolution_azimuth, polarisation, processing_level, geometry_wkt, route_status,
        source_topic, source_partition, source_offset, raw_payload)
    select gen_random_uuid(), 'KA-7 route ' || g, 'R' || g, 'KA-7', 'Kondor-FKA No. 7', g, 'descending',
        now(), now(), -1, 1, 1, 2, 3, 2.5, '["HH"]', 'L1', 'POLYGON((30 10,40 40,20 40,10 20,30 10))',
        'PROCESSED', 'relaytest-seed-' || gen_random_uuid(), 0, g, '{}'
    from generate_series(1, $1) as g
    returning route_id
), e as (
    select gen_random_uuid() as id, p.route_id, et.event_type, et.topic
    from p cross join (values ('ModeStatusChangedEvent', $2::text), ('RouteGeoRefEvent', $3::text)) as et(event_type, topic)
)
insert into route_passport_outbox (id, route_id, event_type, topic, message_key, payload, headers, max_attempts)
select id, route_id, event_type, topic, route_id::text,
       jsonb_build_object('type', event_type, 'data', jsonb_build_object('routeId', route_id,
           'routeNameFull', 'KA-7 route', 'geometry', 'POLYGON((30 10,40 40,20 40,10 20,30 10))',
           'routeStatus', 'PROCESSED'), 'traceId', null, 'correlationId', null,
           'group', 'pcp', 'source', 'route-processing'),
       jsonb_build_object('type', event_type, 'eventId', id::text), $4::int
from e`

// Seed inserts n passports (2n outbox rows) on topics a and b.
func Seed(t testing.TB, pool *pgxpool.Pool, n int, a, b string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := pool.Exec(ctx, SeedSQL, n, a, b, DefaultMaxAttempts); err != nil {
		t.Fatalf("relaytest: seed: %v", err)
	}
}

// State is a row's status as the tests check it.
type State struct {
	Status        string
	Attempts      int
	MaxAttempts   int
	LastError     *string
	NextAttemptAt time.Time
	LockedUntil   *time.Time
	PublishedAt   *time.Time
	UpdatedAt     time.Time
}

// Get reads a row's state.
func Get(t testing.TB, pool *pgxpool.Pool, id uuid.UUID) State {
	t.Helper()
	var s State
	err := pool.QueryRow(context.Background(), `
select status, attempts, max_attempts, last_error, next_attempt_at, locked_until, published_at, updated_at
from route_passport_outbox where id = $1::uuid`, id.String()).
		Scan(&s.Status, &s.Attempts, &s.MaxAttempts, &s.LastError, &s.NextAttemptAt, &s.LockedUntil, &s.PublishedAt, &s.UpdatedAt)
	if err != nil {
		t.Fatalf("relaytest: read outbox row %s: %v", id, err)
	}
	return s
}

// Count returns the number of rows with status.
func Count(t testing.TB, pool *pgxpool.Pool, status string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `select count(*) from route_passport_outbox where status = $1`, status).Scan(&n); err != nil {
		t.Fatalf("relaytest: count: %v", err)
	}
	return n
}

// Describe lists the outbox rows, oldest first, with what a test that
// waited in vain needs to tell why: status, attempts, and the lease as seen
// from the database's clock.
func Describe(t testing.TB, pool *pgxpool.Pool) string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `
select format('%s %s attempts=%s lease=%s', id, status, attempts,
              case when locked_until is null then 'none'
                   else format('%s s left', round(extract(epoch from locked_until - now())::numeric, 2)) end)
from route_passport_outbox order by created_at`)
	if err != nil {
		t.Fatalf("relaytest: describe outbox: %v", err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("relaytest: describe outbox: %v", err)
	}
	return strings.Join(lines, "; ")
}

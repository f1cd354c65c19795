package store

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pcp/route-processing/pkg/jsontext"
	"github.com/pcp/route-processing/pkg/outbox"
	"github.com/pcp/route-processing/pkg/passport"
)

// The ingest write's statement and its arguments: the passports and their
// outbox rows as one array per column (passports.go runs it).

// writeArgs returns the arguments of writeSQL that write accepted (see
// [Passports.BeginWrite]) and how many routes they write; none when
// accepted is empty.
func (s *Passports) writeArgs(accepted []passport.Accepted) ([]any, int, error) {
	first := make(map[string]int, len(accepted))
	last := make(map[string]int, len(accepted))
	order := make([]string, 0, len(accepted))
	for i := range accepted {
		id := accepted[i].Passport.RouteID
		if _, seen := first[id]; !seen {
			first[id] = i
			order = append(order, id)
		}
		last[id] = i
	}

	pr := newPassportRows(len(order))
	or := newOutboxRows(2 * len(order))
	for _, id := range order {
		if err := pr.add(&accepted[last[id]]); err != nil {
			return nil, 0, err
		}
		if err := or.add(accepted[first[id]].Events); err != nil {
			return nil, 0, err
		}
	}
	if len(order) == 0 {
		return nil, 0, nil
	}
	args := append(append(pr.args(), or.args()...), s.maxAttempts)
	if s.reserve {
		args[0] = reserved[[]pgtype.UUID]{size: pr.size() + or.size(), value: pr.routeID}
	}
	return args, len(order), nil
}

// writeSQL upserts the passports and inserts the outbox rows of those it
// inserted, in one statement. A passport already in the table gets no new
// outbox rows (contract §1.5: a redelivery, a replay or an update changes
// the row in place, "no new outbox rows"), whether or not its first events
// are still in the outbox: retention deletes PUBLISHED rows, and inserting
// "what is absent" would publish a replay's events again, under new event
// ids, a day later. xmax = 0 tells a row this statement inserted from one it
// updated (ON CONFLICT DO UPDATE locks the row: its xmax is this
// transaction's). A concurrent writer of the same new route waits for the
// first one's commit and then updates, so one of them inserts the events.
// The foreign key is checked at the end of the statement, after the CTE's
// inserts. The join also drops an event whose route is not in the write at
// all (the foreign key refused such a write before): passport.Passport.Events gives
// each event its passport's route id, which is what makes that impossible.
//
// A record does not replace a route's row written from a later record of
// the same partition (a higher offset) after the record was produced (the
// row's updated_at past the record's timestamp): that is a write of a
// partition's former owner, held up (for a connection, or behind another
// session's row lock) past the wait of the revocation and committing after
// the new owner wrote the route's next version, which it would otherwise
// undo. Offsets alone cannot tell it, since they start again when a topic
// is recreated; the new topic's records, produced after the old row was
// written, do replace it. A record without a timestamp replaces the row as
// before. The passport then counts as written: the later version stays,
// as if the records had committed in their order; the statement's rows are
// the routes it kept out so (the caller counts them, and its command tag
// does).
const writeSQL = `
with up as (
insert into route_passports (
    route_id, route_name_full, route_name_short, ka_short, ka_full,
    orbit_number, orbit_state, interval_begin, interval_end,
    roll_angle_min, roll_angle_max, visir_angle_min, visir_angle_max,
    resolution_range, resolution_azimuth, polarisation, processing_level,
    geometry_wkt, route_status, trace_id, correlation_id,
    source_topic, source_partition, source_offset, source_key, raw_payload,
    source_timestamp, created_at, updated_at)
select *, statement_timestamp(), statement_timestamp() from unnest(
    $1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[],
    $6::int8[], $7::text[], $8::timestamptz[], $9::timestamptz[],
    $10::float8[], $11::float8[], $12::float8[], $13::float8[],
    $14::float8[], $15::float8[], $16::jsonb[], $17::text[],
    $18::text[], $19::text[], $20::text[], $21::text[],
    $22::text[], $23::int4[], $24::int8[], $25::bytea[], $26::jsonb[],
    $27::timestamptz[])
order by 1
on conflict (route_id) do update set
    route_name_full = excluded.route_name_full,
    route_name_short = excluded.route_name_short,
    ka_short = excluded.ka_short,
    ka_full = excluded.ka_full,
    orbit_number = excluded.orbit_number,
    orbit_state = excluded.orbit_state,
    interval_begin = excluded.interval_begin,
    interval_end = excluded.interval_end,
    roll_angle_min = excluded.roll_angle_min,
    roll_angle_max = excluded.roll_angle_max,
    visir_angle_min = excluded.visir_angle_min,
    visir_angle_max = excluded.visir_angle_max,
    resolution_range = excluded.resolution_range,
    resolution_azimuth = excluded.resolution_azimuth,
    polarisation = excluded.polarisation,
    processing_level = excluded.processing_level,
    geometry_wkt = excluded.geometry_wkt,
    route_status = excluded.route_status,
    trace_id = excluded.trace_id,
    correlation_id = excluded.correlation_id,
    source_topic = excluded.source_topic,
    source_partition = excluded.source_partition,
    source_offset = excluded.source_offset,
    source_key = excluded.source_key,
    raw_payload = excluded.raw_payload,
    source_timestamp = excluded.source_timestamp,
    updated_at = statement_timestamp()
where ` + KeepLaterRecordSQL + `
returning route_id, xmax = 0 as inserted),
events as (
insert into route_passport_outbox (
    id, route_id, event_type, topic, message_key, payload, headers,
    status, attempts, max_attempts, next_attempt_at)
select t.id, t.route_id, t.event_type, t.topic, t.message_key, t.payload, t.headers,
    'PENDING', 0, $35, now()
from unnest($28::uuid[], $29::uuid[], $30::text[], $31::text[], $32::text[], $33::jsonb[], $34::jsonb[])
    as t(id, route_id, event_type, topic, message_key, payload, headers)
join up on up.route_id = t.route_id and up.inserted
order by t.route_id, t.event_type
on conflict (route_id, event_type) do nothing)
select w.route_id from unnest($1::uuid[]) as w(route_id)
where not exists (select 1 from up where up.route_id = w.route_id)`

// KeepLaterRecordSQL is the condition on which the passports' upsert
// (ON CONFLICT DO UPDATE … WHERE) replaces a route's row: not with an
// older record of the same partition than the row's (see writeSQL).
// Exported for the bench's DB-only writer, which upserts the same way.
const KeepLaterRecordSQL = `not (route_passports.source_topic = excluded.source_topic
    and route_passports.source_partition = excluded.source_partition
    and route_passports.source_offset > excluded.source_offset
    and coalesce(route_passports.updated_at > excluded.source_timestamp, false))`

// passportRows holds the unnest arrays of the upsert, one per column.
type passportRows struct {
	routeID                              []pgtype.UUID
	nameFull, nameShort, kaShort, kaFull []string
	orbit                                []int64
	orbitState                           []string
	begin, end                           []time.Time
	rollMin, rollMax, visirMin, visirMax []float64
	resRange, resAzimuth                 []float64
	polarisation                         [][]byte
	level, wkt, status                   []string
	traceID, correlationID               []*string
	srcTopic                             []string
	srcPartition                         []int32
	srcOffset                            []int64
	srcKey                               [][]byte
	raw                                  [][]byte
	srcTimestamp                         []pgtype.Timestamptz
}

func newPassportRows(n int) *passportRows {
	return &passportRows{
		routeID: make([]pgtype.UUID, 0, n), nameFull: make([]string, 0, n), nameShort: make([]string, 0, n),
		kaShort: make([]string, 0, n), kaFull: make([]string, 0, n), orbit: make([]int64, 0, n),
		orbitState: make([]string, 0, n), begin: make([]time.Time, 0, n), end: make([]time.Time, 0, n),
		rollMin: make([]float64, 0, n), rollMax: make([]float64, 0, n),
		visirMin: make([]float64, 0, n), visirMax: make([]float64, 0, n),
		resRange: make([]float64, 0, n), resAzimuth: make([]float64, 0, n),
		polarisation: make([][]byte, 0, n), level: make([]string, 0, n), wkt: make([]string, 0, n),
		status: make([]string, 0, n), traceID: make([]*string, 0, n), correlationID: make([]*string, 0, n),
		srcTopic: make([]string, 0, n), srcPartition: make([]int32, 0, n), srcOffset: make([]int64, 0, n),
		srcKey: make([][]byte, 0, n), raw: make([][]byte, 0, n), srcTimestamp: make([]pgtype.Timestamptz, 0, n),
	}
}

func (r *passportRows) add(acc *passport.Accepted) error {
	p, rec := acc.Passport, &acc.Source
	id, err := uuid.Parse(p.RouteID)
	if err != nil {
		return &encodeError{fmt.Errorf("encode route id of offset %d: %w", rec.Offset, err)}
	}
	r.routeID = append(r.routeID, uuidParam(id))
	r.nameFull = append(r.nameFull, p.RouteNameFull)
	r.nameShort = append(r.nameShort, p.RouteNameShort)
	r.kaShort = append(r.kaShort, p.KaShort)
	r.kaFull = append(r.kaFull, p.KaFull)
	r.orbit = append(r.orbit, p.OrbitNumber)
	r.orbitState = append(r.orbitState, p.OrbitState)
	r.begin = append(r.begin, p.IntervalBegin)
	r.end = append(r.end, p.IntervalEnd)
	r.rollMin = append(r.rollMin, p.RollAngle.Min)
	r.rollMax = append(r.rollMax, p.RollAngle.Max)
	r.visirMin = append(r.visirMin, p.VisirAngle.Min)
	r.visirMax = append(r.visirMax, p.VisirAngle.Max)
	r.resRange = append(r.resRange, p.ResolutionRange)
	r.resAzimuth = append(r.resAzimuth, p.ResolutionAzimuth)
	r.polarisation = append(r.polarisation, jsontext.AppendStrings(nil, p.Polarisation))
	r.level = append(r.level, p.ProcessingLevel)
	r.wkt = append(r.wkt, p.GeometryWKT)
	r.status = append(r.status, p.RouteStatus)
	r.traceID = append(r.traceID, p.TraceID)
	r.correlationID = append(r.correlationID, p.CorrelationID)
	r.srcTopic = append(r.srcTopic, rec.Topic)
	r.srcPartition = append(r.srcPartition, rec.Partition)
	r.srcOffset = append(r.srcOffset, rec.Offset)
	r.srcKey = append(r.srcKey, rec.Key)
	r.raw = append(r.raw, acc.RawPayload())
	// NULL when the record has none: the upsert's guard then holds back
	// nothing.
	r.srcTimestamp = append(r.srcTimestamp, pgtype.Timestamptz{Time: rec.Timestamp, Valid: !rec.Timestamp.IsZero()})
	return nil
}

func (r *passportRows) args() []any {
	return []any{
		r.routeID, r.nameFull, r.nameShort, r.kaShort, r.kaFull,
		r.orbit, r.orbitState, r.begin, r.end,
		r.rollMin, r.rollMax, r.visirMin, r.visirMax,
		r.resRange, r.resAzimuth, jsonArray(r.polarisation), r.level,
		r.wkt, r.status, r.traceID, r.correlationID,
		r.srcTopic, r.srcPartition, r.srcOffset, r.srcKey, jsonArray(r.raw),
		r.srcTimestamp,
	}
}

// size is about what pgx encodes the rows into, for [reserved]: the
// documents, the WKT and the keys, and a kilobyte per passport for the
// other two dozen columns, a few hundred bytes with typical values (with
// outboxRows.size, 11 % above the encoded size of passportgen's passports;
// TestWriteReservesItsParameters holds it between 1 and 1.5 times).
func (r *passportRows) size() int {
	n := 1024 * len(r.routeID)
	for i := range r.raw {
		n += len(r.raw[i]) + len(r.wkt[i]) + len(r.srcKey[i])
	}
	return n
}

// jsonArray makes pgx encode raw JSON documents as jsonb[] elements rather
// than bytea.
func jsonArray(docs [][]byte) []json.RawMessage {
	out := make([]json.RawMessage, len(docs))
	for i, d := range docs {
		out[i] = d
	}
	return out
}

// outboxRows holds the unnest arrays of the outbox insert.
type outboxRows struct {
	id, routeID           []pgtype.UUID
	eventType, topic, key []string
	payload, headers      [][]byte
}

func newOutboxRows(n int) *outboxRows {
	return &outboxRows{
		id: make([]pgtype.UUID, 0, n), routeID: make([]pgtype.UUID, 0, n), eventType: make([]string, 0, n),
		topic: make([]string, 0, n), key: make([]string, 0, n),
		payload: make([][]byte, 0, n), headers: make([][]byte, 0, n),
	}
}

// add appends events as they are: which events a passport yields, and
// their keys, payloads and headers, is the domain's rule
// (passport.Passport.Events).
func (o *outboxRows) add(events []outbox.Event) error {
	for _, ev := range events {
		routeID, err := uuid.Parse(ev.RouteID)
		if err != nil {
			return &encodeError{fmt.Errorf("encode route id of event %s: %w", ev.ID, err)}
		}
		o.id = append(o.id, uuidParam(ev.ID))
		o.routeID = append(o.routeID, uuidParam(routeID))
		o.eventType = append(o.eventType, ev.Type)
		o.topic = append(o.topic, ev.Topic)
		o.key = append(o.key, ev.Key)
		o.payload = append(o.payload, ev.Payload)
		o.headers = append(o.headers, outbox.HeadersJSON(ev.Headers))
	}
	return nil
}

// size is about what pgx encodes the rows into, for [reserved]: the
// payloads and headers, and 200 bytes per event for the rest (ids, type,
// topic, key: about 150).
func (o *outboxRows) size() int {
	n := 200 * len(o.id)
	for i := range o.payload {
		n += len(o.payload[i]) + len(o.headers[i])
	}
	return n
}

func (o *outboxRows) args() []any {
	return []any{o.id, o.routeID, o.eventType, o.topic, o.key, jsonArray(o.payload), jsonArray(o.headers)}
}

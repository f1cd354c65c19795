package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pcp/route-processing/pkg/passport"
)

// OutboxConfig is what the ingest write freezes into each new outbox row.
type OutboxConfig struct {
	// TopicProcessedRoute receives ModeStatusChangedEvent (TOPIC_PROCESSED_ROUTE).
	TopicProcessedRoute string
	// TopicRouteGeoreference receives RouteGeoRefEvent (TOPIC_ROUTE_GEOREFERENCE).
	TopicRouteGeoreference string
	// MessageKey is the OUTBOX_MESSAGE_KEY mode given to Passport.MessageKey.
	MessageKey string
	// MaxAttempts is stored in max_attempts (OUTBOX_MAX_ATTEMPTS).
	MaxAttempts int
}

// IngestRecord is one accepted input record: the validated passport and
// where it came from.
type IngestRecord struct {
	Passport *passport.Passport
	// Source of the record (route_passports.source_*).
	Topic     string
	Partition int32
	Offset    int64
	Key       []byte // nil: the record had no key
	// Value is the input record value, stored as raw_payload (jsonb).
	Value []byte
	// Traceparent is the input's W3C traceparent header; nil when the record
	// had none (then the outbox headers carry none either).
	Traceparent *string
}

// Passports writes accepted passports with their outbox rows.
type Passports struct {
	pool *pgxpool.Pool
	cfg  OutboxConfig
}

// NewPassports returns the ingest writer over pool.
func NewPassports(pool *pgxpool.Pool, cfg OutboxConfig) *Passports {
	return &Passports{pool: pool, cfg: cfg}
}

// Ping makes one round trip to the database.
func (s *Passports) Ping(ctx context.Context) error {
	return s.pool.Ping(ctx)
}

// Write writes recs in one transaction; see [PassportTx.Write].
func (s *Passports) Write(ctx context.Context, recs []IngestRecord) error {
	tx, err := s.Begin(ctx)
	if err != nil {
		return err
	}
	if err := tx.Write(ctx, recs); err != nil {
		_ = tx.Rollback(ctx)
		return err
	}
	return tx.Commit(ctx)
}

// Begin starts a write transaction on a connection of its own. The caller
// must end it with Commit or Rollback.
//
// Splitting Write from Commit lets the ingestor pipeline batches: the next
// batch's statements run while this one's commit waits for its WAL flush.
func (s *Passports) Begin(ctx context.Context) (*PassportTx, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("begin ingest transaction: %w", err)
	}
	return &PassportTx{tx: tx, cfg: s.cfg}, nil
}

// PassportTx is one ingest transaction.
type PassportTx struct {
	tx  pgx.Tx
	cfg OutboxConfig
}

// Commit commits the transaction.
func (t *PassportTx) Commit(ctx context.Context) error {
	if err := t.tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit ingest transaction: %w", err)
	}
	return nil
}

// Rollback abandons the transaction; it is safe to call after Commit.
func (t *PassportTx) Rollback(ctx context.Context) error {
	err := t.tx.Rollback(ctx)
	if err != nil && !errors.Is(err, pgx.ErrTxClosed) {
		return fmt.Errorf("rollback ingest transaction: %w", err)
	}
	return nil
}

// Write upserts the passports of recs by route_id (last write wins,
// updated_at = statement_timestamp(), created_at kept), inserts the two outbox rows of each
// route that has none yet, and notifies [NotifyChannel], all in one round
// trip.
//
// recs are in input order and may name a route more than once: the route's
// row gets the last record, while the outbox rows (inserted only when
// absent) get the first, exactly as if the records had been written one
// transaction each.
//
// Rows are sent as arrays and expanded with unnest, in route_id order, so
// that concurrent writers take row locks in the same order.
//
// Times are statement_timestamp(), not now(): the ingestor pipelines
// transactions, so a later write of a route may run in a transaction that
// started before the one that inserted it, and now() (the transaction
// start) would then put updated_at before created_at.
func (t *PassportTx) Write(ctx context.Context, recs []IngestRecord) error {
	if len(recs) == 0 {
		return nil
	}
	first := make(map[string]int, len(recs))
	last := make(map[string]int, len(recs))
	order := make([]string, 0, len(recs))
	for i := range recs {
		id := recs[i].Passport.RouteID
		if _, seen := first[id]; !seen {
			first[id] = i
			order = append(order, id)
		}
		last[id] = i
	}

	pr := newPassportRows(len(order))
	or := newOutboxRows(2 * len(order))
	for _, id := range order {
		if err := pr.add(&recs[last[id]]); err != nil {
			return err
		}
		if err := or.add(&recs[first[id]], t.cfg); err != nil {
			return err
		}
	}

	b := &pgx.Batch{}
	b.Queue(upsertPassportsSQL, pr.args()...)
	b.Queue(insertOutboxSQL, append(or.args(), t.cfg.MaxAttempts)...)
	b.Queue("select pg_notify($1, '')", NotifyChannel)
	if err := t.tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("write %d passports: %w", len(order), err)
	}
	return nil
}

const upsertPassportsSQL = `
insert into route_passports (
    route_id, route_name_full, route_name_short, ka_short, ka_full,
    orbit_number, orbit_state, interval_begin, interval_end,
    roll_angle_min, roll_angle_max, visir_angle_min, visir_angle_max,
    resolution_range, resolution_azimuth, polarisation, processing_level,
    geometry_wkt, route_status, trace_id, correlation_id,
    source_topic, source_partition, source_offset, source_key, raw_payload,
    created_at, updated_at)
select *, statement_timestamp(), statement_timestamp() from unnest(
    $1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[],
    $6::int8[], $7::text[], $8::timestamptz[], $9::timestamptz[],
    $10::float8[], $11::float8[], $12::float8[], $13::float8[],
    $14::float8[], $15::float8[], $16::jsonb[], $17::text[],
    $18::text[], $19::text[], $20::text[], $21::text[],
    $22::text[], $23::int4[], $24::int8[], $25::bytea[], $26::jsonb[])
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
    updated_at = statement_timestamp()`

const insertOutboxSQL = `
insert into route_passport_outbox (
    id, route_id, event_type, topic, message_key, payload, headers,
    status, attempts, max_attempts, next_attempt_at)
select id, route_id, event_type, topic, message_key, payload, headers,
    'PENDING', 0, $8, now()
from unnest($1::uuid[], $2::uuid[], $3::text[], $4::text[], $5::text[], $6::jsonb[], $7::jsonb[])
    as t(id, route_id, event_type, topic, message_key, payload, headers)
order by route_id, event_type
on conflict (route_id, event_type) do nothing`

// passportRows holds the unnest arrays of the upsert, one per column.
type passportRows struct {
	routeID, nameFull, nameShort, kaShort, kaFull []string
	orbit                                         []int64
	orbitState                                    []string
	begin, end                                    []time.Time
	rollMin, rollMax, visirMin, visirMax          []float64
	resRange, resAzimuth                          []float64
	polarisation                                  [][]byte
	level, wkt, status                            []string
	traceID, correlationID                        []*string
	srcTopic                                      []string
	srcPartition                                  []int32
	srcOffset                                     []int64
	srcKey                                        [][]byte
	raw                                           [][]byte
}

func newPassportRows(n int) *passportRows {
	return &passportRows{
		routeID: make([]string, 0, n), nameFull: make([]string, 0, n), nameShort: make([]string, 0, n),
		kaShort: make([]string, 0, n), kaFull: make([]string, 0, n), orbit: make([]int64, 0, n),
		orbitState: make([]string, 0, n), begin: make([]time.Time, 0, n), end: make([]time.Time, 0, n),
		rollMin: make([]float64, 0, n), rollMax: make([]float64, 0, n),
		visirMin: make([]float64, 0, n), visirMax: make([]float64, 0, n),
		resRange: make([]float64, 0, n), resAzimuth: make([]float64, 0, n),
		polarisation: make([][]byte, 0, n), level: make([]string, 0, n), wkt: make([]string, 0, n),
		status: make([]string, 0, n), traceID: make([]*string, 0, n), correlationID: make([]*string, 0, n),
		srcTopic: make([]string, 0, n), srcPartition: make([]int32, 0, n), srcOffset: make([]int64, 0, n),
		srcKey: make([][]byte, 0, n), raw: make([][]byte, 0, n),
	}
}

func (r *passportRows) add(rec *IngestRecord) error {
	p := rec.Passport
	pol, err := json.Marshal(p.Polarisation)
	if err != nil {
		return fmt.Errorf("encode polarisation of %s: %w", p.RouteID, err)
	}
	r.routeID = append(r.routeID, p.RouteID)
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
	r.polarisation = append(r.polarisation, pol)
	r.level = append(r.level, p.ProcessingLevel)
	r.wkt = append(r.wkt, p.GeometryWKT)
	r.status = append(r.status, p.RouteStatus)
	r.traceID = append(r.traceID, p.TraceID)
	r.correlationID = append(r.correlationID, p.CorrelationID)
	r.srcTopic = append(r.srcTopic, rec.Topic)
	r.srcPartition = append(r.srcPartition, rec.Partition)
	r.srcOffset = append(r.srcOffset, rec.Offset)
	r.srcKey = append(r.srcKey, rec.Key)
	r.raw = append(r.raw, rec.Value)
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
	}
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
	id, routeID, eventType, topic, key []string
	payload, headers                   [][]byte
}

func newOutboxRows(n int) *outboxRows {
	return &outboxRows{
		id: make([]string, 0, n), routeID: make([]string, 0, n), eventType: make([]string, 0, n),
		topic: make([]string, 0, n), key: make([]string, 0, n),
		payload: make([][]byte, 0, n), headers: make([][]byte, 0, n),
	}
}

func (o *outboxRows) add(rec *IngestRecord, cfg OutboxConfig) error {
	p := rec.Passport
	key := p.MessageKey(cfg.MessageKey)
	for _, ev := range [...]struct{ typ, topic string }{
		{passport.EventModeStatusChanged, cfg.TopicProcessedRoute},
		{passport.EventRouteGeoRef, cfg.TopicRouteGeoreference},
	} {
		id, err := uuid.NewV7()
		if err != nil {
			return fmt.Errorf("new outbox id: %w", err)
		}
		hdr, err := outboxHeaders(ev.typ, id.String(), p, rec.Traceparent)
		if err != nil {
			return err
		}
		o.id = append(o.id, id.String())
		o.routeID = append(o.routeID, p.RouteID)
		o.eventType = append(o.eventType, ev.typ)
		o.topic = append(o.topic, ev.topic)
		o.key = append(o.key, key)
		o.payload = append(o.payload, p.Payload(ev.typ))
		o.headers = append(o.headers, hdr)
	}
	return nil
}

func (o *outboxRows) args() []any {
	return []any{o.id, o.routeID, o.eventType, o.topic, o.key, jsonArray(o.payload), jsonArray(o.headers)}
}

// outboxHeaders renders the headers object of contract §2: type and eventId
// always, traceId and correlationId when non-empty, traceparent when the
// input record had one.
func outboxHeaders(eventType, eventID string, p *passport.Passport, traceparent *string) ([]byte, error) {
	h := make(map[string]string, 5)
	h["type"] = eventType
	h["eventId"] = eventID
	if p.TraceID != nil && *p.TraceID != "" {
		h["traceId"] = *p.TraceID
	}
	if p.CorrelationID != nil && *p.CorrelationID != "" {
		h["correlationId"] = *p.CorrelationID
	}
	if traceparent != nil {
		h["traceparent"] = *traceparent
	}
	b, err := json.Marshal(h)
	if err != nil {
		return nil, fmt.Errorf("encode outbox headers: %w", err)
	}
	return b, nil
}

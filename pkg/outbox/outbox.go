// Package outbox holds the outbox model shared by the writer and the relay:
// the events an accepted passport yields, a claimed row, its lease and what
// can happen to it. It is plain data: store fills it from
// route_passport_outbox, ingest hands events to store, and relay consumes
// rows, so neither side imports the other or the database driver.
package outbox

import (
	"time"

	"github.com/google/uuid"

	"github.com/pcp/route-processing/pkg/record"
)

// DefaultMaxAttempts is OUTBOX_MAX_ATTEMPTS's default: the publishes a row
// may fail before it becomes FAILED (the relay's rule; the ingestor writes it
// into new rows' max_attempts).
const DefaultMaxAttempts = 10

// Statuses of route_passport_outbox.status (contract §3).
const (
	StatusPending   = "PENDING"
	StatusPublished = "PUBLISHED"
	StatusFailed    = "FAILED"
)

// Event is one outbox row to insert: an event frozen at ingest, published
// later exactly as stored.
type Event struct {
	ID      uuid.UUID
	RouteID string
	Type    string
	Topic   string
	Key     string
	// Payload is the event document, JSON.
	Payload []byte
	// Headers are the record headers in publication order (see
	// [OrderHeaders]).
	Headers []record.Header
}

// Row is a claimed outbox row: what the relay needs to publish it and to
// decide what happens to it afterwards.
type Row struct {
	ID        uuid.UUID
	RouteID   uuid.UUID
	EventType string
	Topic     string
	Key       string
	// Payload is the frozen event document, published unchanged.
	Payload []byte
	// Headers are the stored headers in publication order.
	Headers []record.Header
	// HeadersError says why the stored headers could not be decoded; the
	// row is then not published and the error counts as an attempt (its
	// neighbours in the claim must not suffer for it).
	HeadersError string
	Attempts     int
	CreatedAt    time.Time
	// AgeAtClaim is how old the row was when its claim returned: its age
	// at the claim statement's start by the database's clock (the one
	// created_at is written with), plus what the claim took by the
	// relay's. The relay measures the rows' waits with it, so that its own
	// clock, which may be off from the database's by more than the waits,
	// does not enter.
	AgeAtClaim time.Duration
	// Token is the lease token of the claim that returned the row.
	Token uuid.UUID
}

// Lease names the row and the token it was claimed with.
func (r *Row) Lease() Lease { return Lease{ID: r.ID, Token: r.Token} }

// Record is the Kafka record the row is published as (contract §2): its
// stored key, or its route id when that is empty, and its stored headers
// with type and eventId those of the row's event type and id. A row written
// by other means than the ingestor (an operator's or another service's
// SQL) may lack them, and downstream de-duplicates on eventId.
func (r *Row) Record() record.Record {
	key := r.Key
	if key == "" {
		key = r.RouteID.String()
	}
	hs, id := r.Headers, r.ID.String()
	if !hasHeader(hs, HeaderType, r.EventType) || !hasHeader(hs, HeaderEventID, id) {
		m := make(map[string]string, len(hs)+2)
		for _, h := range hs {
			m[h.Key] = string(h.Value)
		}
		m[HeaderType], m[HeaderEventID] = r.EventType, id
		hs = OrderHeaders(m)
	}
	return record.Record{Topic: r.Topic, Key: []byte(key), Value: r.Payload, Headers: hs}
}

// hasHeader reports whether hs carry key with value v, and no other value.
func hasHeader(hs []record.Header, key, v string) bool {
	found := false
	for _, h := range hs {
		if h.Key == key {
			if string(h.Value) != v {
				return false
			}
			found = true
		}
	}
	return found
}

// Lease names one claimed row and its lease token. Every change after the
// claim names the token, so a relay whose lease expired (and whose rows
// another relay took over) changes nothing.
type Lease struct {
	ID    uuid.UUID
	Token uuid.UUID
}

// Retry is a failed publish to record: the row's attempts grow by one; it
// becomes FAILED when they reach the relay's OUTBOX_MAX_ATTEMPTS (written
// into the row's max_attempts too), otherwise it is due again after Delay.
// Postpone uses the same shape without counting.
type Retry struct {
	ID    uuid.UUID
	Token uuid.UUID
	Error string
	Delay time.Duration
}

// RetryResult is the state a Retry left its row in.
type RetryResult struct {
	ID            uuid.UUID
	Status        string
	Attempts      int
	NextAttemptAt time.Time
}

// PendingSummary feeds the pending and failed-rows gauges.
type PendingSummary struct {
	Pending   int64
	OldestAge time.Duration
	// Failed counts FAILED rows, which wait for an operator.
	Failed int64
}

// Control is the pause state every relay honours (outbox_relay_control):
// set by `outbox-relay pause|resume`, read by the relays and `stats`.
type Control struct {
	Paused    bool
	Reason    string
	UpdatedBy string
	UpdatedAt time.Time
}

package passport

import (
	"strings"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/pcp/route-processing/pkg/outbox"
	"github.com/pcp/route-processing/pkg/record"
)

// EventConfig is what the events of an accepted passport are frozen with
// (contract §2).
type EventConfig struct {
	// TopicProcessedRoute receives ModeStatusChangedEvent (TOPIC_PROCESSED_ROUTE).
	TopicProcessedRoute string
	// TopicRouteGeoreference receives RouteGeoRefEvent (TOPIC_ROUTE_GEOREFERENCE).
	TopicRouteGeoreference string
	// MessageKey is the OUTBOX_MESSAGE_KEY mode ([KeyTraceID] or [KeyRouteID]).
	MessageKey string
}

// Accepted is a valid input record on its way into the database: the
// passport, the record it came from (route_passports.source_*, raw_payload)
// and the events it yields. The store writes it as it is.
type Accepted struct {
	Passport *Passport
	Source   record.Record
	// Events are inserted only when the route's passport row is new: the
	// first accepted record of a route freezes them, even after retention
	// deleted them.
	Events []outbox.Event
}

// RawPayload is what raw_payload stores: the record value, or a copy with
// the escapes jsonb cannot store replaced (rawpayload.go).
func (a *Accepted) RawPayload() []byte {
	if r := repairForJSONB(a.Source.Value); r != nil {
		return r
	}
	return a.Source.Value
}

// Accept pairs a parsed passport with its source record and its events,
// whose traceparent is the input's (contract §2); see [AcceptTraced].
func Accept(p *Passport, src record.Record, cfg EventConfig) Accepted {
	return AcceptTraced(p, src, cfg, "")
}

// AcceptTraced is [Accept] for an ingestor that traces: span is the
// traceparent of the span it opened for the record as a child of the
// input's traceparent ("" when tracing is off or the input's value did not
// parse). This is the one home of the rule for the events' traceparent:
// none when the input had none; else span when set, so that the relay's
// publish span and the consumers continue the ingestor's trace; else the
// input's value unchanged, unless it is not text that the outbox's jsonb
// headers can hold (invalid UTF-8, a NUL byte: never a W3C traceparent),
// which is left out rather than altered, and rather than the valid passport
// refused by the database.
func AcceptTraced(p *Passport, src record.Record, cfg EventConfig, span string) Accepted {
	var traceparent *string
	if v, ok := src.Header(outbox.HeaderTraceparent); ok {
		s := span
		if s == "" {
			s = string(v)
		}
		if utf8.ValidString(s) && !strings.ContainsRune(s, 0) {
			traceparent = &s
		}
	}
	return Accepted{Passport: p, Source: src, Events: p.Events(cfg, traceparent)}
}

// Events returns the two events of contract §2, in the order
// ModeStatusChangedEvent, RouteGeoRefEvent: a new UUIDv7 id each, the key
// of cfg.MessageKey, the frozen payload, and the headers type and eventId
// always, traceId and correlationId when non-empty, traceparent when the
// input record had one (traceparent nil: it had none).
func (p *Passport) Events(cfg EventConfig, traceparent *string) []outbox.Event {
	key := p.MessageKey(cfg.MessageKey)
	out := make([]outbox.Event, 0, 2)
	for _, ev := range [...]struct{ typ, topic string }{
		{EventModeStatusChanged, cfg.TopicProcessedRoute},
		{EventRouteGeoRef, cfg.TopicRouteGeoreference},
	} {
		// NewV7 fails only when crypto/rand does, which since Go 1.24
		// crashes the program instead of returning an error.
		id := uuid.Must(uuid.NewV7())
		h := make(map[string]string, 5)
		h[outbox.HeaderType] = ev.typ
		h[outbox.HeaderEventID] = id.String()
		if p.TraceID != nil && *p.TraceID != "" {
			h[outbox.HeaderTraceID] = *p.TraceID
		}
		if p.CorrelationID != nil && *p.CorrelationID != "" {
			h[outbox.HeaderCorrelationID] = *p.CorrelationID
		}
		if traceparent != nil {
			h[outbox.HeaderTraceparent] = *traceparent
		}
		out = append(out, outbox.Event{
			ID: id, RouteID: p.RouteID, Type: ev.typ, Topic: ev.topic, Key: key,
			Payload: p.Payload(ev.typ), Headers: outbox.OrderHeaders(h),
		})
	}
	return out
}

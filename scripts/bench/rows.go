package main

import (
	"encoding/json"
	"fmt"

	"github.com/google/uuid"

	svcconfig "github.com/pcp/route-processing/pkg/config"
	"github.com/pcp/route-processing/pkg/outbox"
	"github.com/pcp/route-processing/pkg/passport"
	"github.com/pcp/route-processing/pkg/passportgen"
	"github.com/pcp/route-processing/pkg/record"
	"github.com/pcp/route-processing/pkg/store"
)

// The ceilings do the service's per-passport work themselves: parse the
// input value with pkg/passport, render both event payloads with
// Passport.Payload and their headers, so that what they write and publish
// is byte for byte what the service would, and the CPU they spend on it is
// the service's too.

// ceilingRow is one accepted passport with its two outbox events.
type ceilingRow struct {
	rec    store.IngestRecord
	events [2]outbox.Event
	// headersJSON are the events' headers as the outbox stores them.
	headersJSON [2][]byte
}

// buildRow parses one input record (input i of the run, on a 3-partition
// topic) and builds its rows.
func buildRow(i int, in passportgen.Record, cfg store.OutboxConfig) (ceilingRow, error) {
	p, err := passport.Parse(in.Value, passport.DefaultLimits())
	if err != nil {
		return ceilingRow{}, fmt.Errorf("parse passport %d: %w", i, err)
	}
	r := ceilingRow{rec: store.IngestRecord{
		Passport: p, Topic: topicInput, Partition: int32(i % 3), Offset: int64(i / 3), Key: in.Key, Value: in.Value,
	}}
	key := p.MessageKey(cfg.MessageKey)
	for j, ev := range [2]struct{ typ, topic string }{
		{passport.EventModeStatusChanged, cfg.TopicProcessedRoute},
		{passport.EventRouteGeoRef, cfg.TopicRouteGeoreference},
	} {
		id, err := uuid.NewV7()
		if err != nil {
			return ceilingRow{}, fmt.Errorf("new outbox id: %w", err)
		}
		hm := eventHeaders(ev.typ, id.String(), p)
		hj, err := json.Marshal(hm)
		if err != nil {
			return ceilingRow{}, fmt.Errorf("encode outbox headers: %w", err)
		}
		r.events[j] = outbox.Event{ID: id, RouteID: p.RouteID, Type: ev.typ, Topic: ev.topic, Key: key,
			Payload: p.Payload(ev.typ), Headers: outbox.OrderHeaders(hm)}
		r.headersJSON[j] = hj
	}
	return r, nil
}

// eventHeaders are contract §2's headers of one event: type and eventId
// always, traceId and correlationId when non-empty (the generated input
// carries no traceparent). It mirrors store's unexported outboxHeaders;
// once store exports it, use that.
func eventHeaders(eventType, eventID string, p *passport.Passport) map[string]string {
	h := make(map[string]string, 4)
	h["type"] = eventType
	h["eventId"] = eventID
	if p.TraceID != nil && *p.TraceID != "" {
		h["traceId"] = *p.TraceID
	}
	if p.CorrelationID != nil && *p.CorrelationID != "" {
		h["correlationId"] = *p.CorrelationID
	}
	return h
}

// outputRecords are the records the relay would publish for rows.
func outputRecords(rows []ceilingRow) []record.Record {
	out := make([]record.Record, 0, 2*len(rows))
	for i := range rows {
		for _, ev := range rows[i].events {
			out = append(out, record.Record{Topic: ev.Topic, Key: []byte(ev.Key), Value: ev.Payload, Headers: ev.Headers})
		}
	}
	return out
}

// ingestorConfig is the service's ingestor configuration under the bench's
// environment (serviceEnv), read through pkg/config as bin/ingestor reads
// it: the ceilings freeze the same topics, key mode and max attempts into
// their rows, and the floor's consumer takes the same Kafka properties.
func (b *bench) ingestorConfig() svcconfig.Ingestor {
	cfg, err := svcconfig.LoadIngestor(b.serviceEnv("postgres://bench/unused", topicInput, topicOut1, topicOut2))
	if err != nil {
		b.t.Fatalf("bench: ingestor configuration: %v", err)
	}
	return cfg
}

func outboxConfigOf(cfg svcconfig.Ingestor) store.OutboxConfig {
	return store.OutboxConfig{TopicProcessedRoute: cfg.TopicProcessedRoute, TopicRouteGeoreference: cfg.TopicRouteGeoreference,
		MessageKey: cfg.MessageKey, MaxAttempts: cfg.OutboxMaxAttempts}
}

package main

import (
	"fmt"
	"time"

	svcconfig "github.com/pcp/route-processing/pkg/config"
	"github.com/pcp/route-processing/pkg/passport"
	"github.com/pcp/route-processing/pkg/passportgen"
	"github.com/pcp/route-processing/pkg/record"
)

// The ceilings do the service's per-passport work themselves, through the
// service's own functions: parse the input value (passport.Parse) and
// freeze its events (passport.Accept: ids, keys, payloads, headers), so
// that what they write and publish is what the service would, and the CPU
// they spend on it is the service's too.

// inputEpochMillis is the timestamp of the ceilings' first input record
// (2026-06-01 UTC).
const inputEpochMillis = 1_780_272_000_000

// acceptRecord parses input i of the run (on a 3-partition topic) and
// accepts it as the ingestor does.
func acceptRecord(i int, in passportgen.Record, ev passport.EventConfig) (passport.Accepted, error) {
	p, err := passport.Parse(in.Value, passport.DefaultLimits())
	if err != nil {
		return passport.Accepted{}, fmt.Errorf("parse passport %d: %w", i, err)
	}
	// Stamped, as a producer stamps its records (the ingestor stores the
	// timestamp with the row), by the input's index, so that the same
	// input is the same row whichever writer writes it.
	src := record.Record{Topic: topicInput, Partition: int32(i % 3), Offset: int64(i / 3), Key: in.Key, Value: in.Value,
		Timestamp: time.UnixMilli(inputEpochMillis + int64(i)), TimestampType: record.TimestampCreateTime}
	return passport.Accept(p, src, ev), nil
}

// outputRecords are the records the relay would publish for accepted (the
// payloads as rendered; see jsonbPayloads for the bytes the relay reads).
func outputRecords(accepted []passport.Accepted) []record.Record {
	out := make([]record.Record, 0, 2*len(accepted))
	for i := range accepted {
		for _, ev := range accepted[i].Events {
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

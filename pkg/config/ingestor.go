package config

import (
	"errors"
	"time"

	"github.com/pcp/route-processing/pkg/ingest"
	"github.com/pcp/route-processing/pkg/passport"
	"github.com/pcp/route-processing/pkg/relay"
)

// Ingestor is the configuration of bin/ingestor.
type Ingestor struct {
	Common
	// ConsumerGroup is the Kafka consumer group (KAFKA_CONSUMER_GROUP).
	ConsumerGroup string
	// Ingest is ingest.DefaultConfig() with the INGEST_* variables, the
	// group, the DLQ topic and the event settings mapped onto it, and
	// validated by ingest (whose defaults and rules these are).
	Ingest ingest.Config
	// OutboxMaxAttempts is stored in each new outbox row's max_attempts
	// (OUTBOX_MAX_ATTEMPTS).
	OutboxMaxAttempts int
}

// LoadIngestor reads the ingestor's configuration from environ (os.Environ form).
func LoadIngestor(environ []string) (Ingestor, error) {
	return loadIngestor(newReader(environ))
}

func loadIngestor(r *reader) (Ingestor, error) {
	c := Ingestor{
		Common:        r.common(),
		ConsumerGroup: r.nonBlank("KAFKA_CONSUMER_GROUP", "pcp-route-processing-service"),
		// The relay owns this rule (contract §5); the ingestor stores it.
		OutboxMaxAttempts: r.outboxMaxAttempts(relay.Config{}.WithDefaults().MaxAttempts),
	}
	in := ingest.DefaultConfig()
	in.ConsumerGroup = c.ConsumerGroup
	in.DLQTopic = c.TopicInputDLQ
	in.Events = passport.EventConfig{
		TopicProcessedRoute:    c.TopicProcessedRoute,
		TopicRouteGeoreference: c.TopicRouteGeoreference,
		MessageKey:             c.MessageKey,
	}
	for _, v := range ingestVars {
		switch dst := v.dst(&in).(type) {
		case *int:
			r.setInt(v.name, dst)
		case *time.Duration:
			r.setDuration(v.name, dst)
		}
	}
	if r.err == nil {
		var fe *ingest.FieldError
		if err := in.Validate(); errors.As(err, &fe) {
			r.fail(ingestVarOf(fe.Field), fe.Reason)
		} else if err != nil {
			r.fail("INGEST_*", err.Error())
		}
	}
	c.Ingest = in
	return c, r.err
}

// ingestVars maps the INGEST_* variables onto ingest.Config fields.
var ingestVars = []struct {
	name, field string
	dst         func(*ingest.Config) any
}{
	{"INGEST_BATCH_SIZE", "BatchSize", func(c *ingest.Config) any { return &c.BatchSize }},
	{"INGEST_BATCH_MAX_WAIT", "BatchMaxWait", func(c *ingest.Config) any { return &c.BatchMaxWait }},
	{"INGEST_MAX_VALUE_BYTES", "Limits.MaxValueBytes", func(c *ingest.Config) any { return &c.Limits.MaxValueBytes }},
	{"INGEST_MAX_POSITIONS", "Limits.MaxPositions", func(c *ingest.Config) any { return &c.Limits.MaxPositions }},
	{"INGEST_RECORD_RETRIES", "RecordRetries", func(c *ingest.Config) any { return &c.RecordRetries }},
	{"INGEST_MAX_BACKOFF", "MaxBackoff", func(c *ingest.Config) any { return &c.MaxBackoff }},
	{"INGEST_DB_TIMEOUT", "DBTimeout", func(c *ingest.Config) any { return &c.DBTimeout }},
	{"INGEST_COMMIT_INTERVAL", "CommitInterval", func(c *ingest.Config) any { return &c.CommitInterval }},
}

// ingestVarOf names the variable behind an ingest.Config field (the field
// itself when no variable sets it).
func ingestVarOf(field string) string {
	for _, v := range ingestVars {
		if v.field == field {
			return v.name
		}
	}
	return field
}

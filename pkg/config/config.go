// Package config reads the environment of contract §5 into one typed struct
// per binary and validates it at start, so that a wrong setting stops the
// process with one line naming the variable instead of failing later.
package config

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/pcp/route-processing/pkg/ingest"
	"github.com/pcp/route-processing/pkg/passport"
	"github.com/pcp/route-processing/pkg/relay"
)

// Error names the variable that is missing or malformed. Mains exit with
// status 2 on it.
type Error struct {
	Var    string
	Reason string
}

func (e *Error) Error() string { return fmt.Sprintf("config: %s: %s", e.Var, e.Reason) }

// KafkaPropertyPrefix marks environment variables that are passed to
// librdkafka unchanged: KAFKA_PROPERTY_SECURITY_PROTOCOL=SASL_SSL becomes
// security.protocol=SASL_SSL. librdkafka property names are lower-case words
// joined by dots, so the mapping is lossless.
const KafkaPropertyPrefix = "KAFKA_PROPERTY_"

// Prefixes of librdkafka properties for one kind of client only.
const (
	KafkaConsumerPropertyPrefix = "KAFKA_CONSUMER_PROPERTY_"
	KafkaProducerPropertyPrefix = "KAFKA_PRODUCER_PROPERTY_"
)

// ConsumerProperties are the librdkafka properties of a consumer:
// KAFKA_PROPERTY_* overridden by KAFKA_CONSUMER_PROPERTY_*.
func (c Common) ConsumerProperties() map[string]string {
	return mergeProps(c.KafkaProperties, c.KafkaConsumerProperties)
}

// ProducerProperties are the librdkafka properties of a producer:
// KAFKA_PROPERTY_* overridden by KAFKA_PRODUCER_PROPERTY_*.
func (c Common) ProducerProperties() map[string]string {
	return mergeProps(c.KafkaProperties, c.KafkaProducerProperties)
}

func mergeProps(base, over map[string]string) map[string]string {
	out := make(map[string]string, len(base)+len(over))
	for k, v := range base {
		out[k] = v
	}
	for k, v := range over {
		out[k] = v
	}
	return out
}

// Common settings of both binaries.
type Common struct {
	// DatabaseURL is the PostgreSQL connection string (DATABASE_URL, required).
	// It may hold a password: never log it.
	DatabaseURL string
	// KafkaBootstrapServers is the broker list (KAFKA_BOOTSTRAP_SERVERS, required).
	KafkaBootstrapServers string
	// KafkaProperties are extra librdkafka properties from KAFKA_PROPERTY_*
	// variables (TLS, SASL, tuning). Values may be secrets: log keys only.
	KafkaProperties map[string]string
	// KafkaConsumerProperties (KAFKA_CONSUMER_PROPERTY_*) and
	// KafkaProducerProperties (KAFKA_PRODUCER_PROPERTY_*) apply to one kind
	// of client only and override KafkaProperties, so a consumer-only
	// setting such as group.instance.id does not make librdkafka warn in
	// every producer.
	KafkaConsumerProperties map[string]string
	KafkaProducerProperties map[string]string

	TopicInput             string // TOPIC_INPUT
	TopicInputDLQ          string // TOPIC_INPUT_DLQ
	TopicProcessedRoute    string // TOPIC_PROCESSED_ROUTE (ModeStatusChangedEvent)
	TopicRouteGeoreference string // TOPIC_ROUTE_GEOREFERENCE (RouteGeoRefEvent)

	// HTTPAddr serves /healthz, /readyz and /metrics (HTTP_ADDR).
	HTTPAddr string
	// LogFormat is "json" (default) or "text" (colour, for terminals).
	LogFormat string
	LogLevel  slog.Level

	// MessageKey chooses the output record key: "traceId" (falling back to
	// routeId when the trace id is missing or empty) or "routeId"
	// (OUTBOX_MESSAGE_KEY). The ingestor applies it when it freezes the
	// outbox rows.
	MessageKey string
}

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

// Relay is the configuration of bin/outbox-relay: the common settings and
// the relay's own, whose defaults and rules are relay.Config's (relayVars
// names the variable of each field).
type Relay struct {
	Common
	relay.Config
	// ListenURL is the connection of the relay's LISTEN
	// (DATABASE_LISTEN_URL; default DatabaseURL). Behind a transaction
	// pooler LISTEN hears nothing: point it at PostgreSQL directly (or at a
	// session-mode pool). It may hold a password: never log it.
	ListenURL string
}

// LoadIngestor reads the ingestor's configuration from environ (os.Environ form).
func LoadIngestor(environ []string) (Ingestor, error) {
	r := newReader(environ)
	c := Ingestor{
		Common:            r.common(),
		ConsumerGroup:     r.str("KAFKA_CONSUMER_GROUP", "pcp-route-processing-service"),
		OutboxMaxAttempts: r.intRange("OUTBOX_MAX_ATTEMPTS", 10, 1, 1_000_000),
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

// relayVars names the environment variable of each relay.Config field that
// one sets.
func relayVars() map[string]string {
	return map[string]string{
		"MaxAttempts":           "OUTBOX_MAX_ATTEMPTS",
		"InitialBackoff":        "OUTBOX_INITIAL_BACKOFF",
		"MaxBackoff":            "OUTBOX_MAX_BACKOFF",
		"LockTimeout":           "OUTBOX_LOCK_TIMEOUT",
		"BatchSize":             "OUTBOX_BATCH_SIZE",
		"PollInterval":          "OUTBOX_POLL_INTERVAL",
		"PublishTimeout":        "OUTBOX_PUBLISH_TIMEOUT",
		"Retention":             "OUTBOX_RETENTION",
		"ProbeMaxBackoff":       "OUTBOX_PROBE_MAX_BACKOFF",
		"Workers":               "OUTBOX_WORKERS",
		"RetentionInterval":     "OUTBOX_RETENTION_INTERVAL",
		"RetentionBatch":        "OUTBOX_RETENTION_BATCH",
		"ClaimFullScanInterval": "OUTBOX_CLAIM_FULL_SCAN_INTERVAL",
		"ClaimWatermarkMargin":  "OUTBOX_CLAIM_WATERMARK_MARGIN",
		"DBTimeout":             "OUTBOX_DB_TIMEOUT",
	}
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
	{"INGEST_DB_TIMEOUT", "WriteTimeout", func(c *ingest.Config) any { return &c.WriteTimeout }},
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

// setInt parses the variable into dst when it is set; the range is the
// component's rule, checked by its Validate.
func (r *reader) setInt(name string, dst *int) {
	s, ok := r.env[name]
	if !ok || s == "" {
		return
	}
	v, err := strconv.Atoi(s)
	if err != nil {
		r.fail(name, fmt.Sprintf("%q is not an integer", s))
		return
	}
	*dst = v
}

// setDuration parses the variable into dst when it is set.
func (r *reader) setDuration(name string, dst *time.Duration) {
	s, ok := r.env[name]
	if !ok || s == "" {
		return
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		r.fail(name, fmt.Sprintf("%q is not a duration (Go syntax, e.g. 500ms, 30s, 2m)", s))
		return
	}
	*dst = v
}

// LoadRelay reads the relay's configuration from environ (os.Environ form).
// It only maps variables onto relay.Config (an unset variable leaves the
// field zero, for relay's default) and names the variable of a field that
// relay.Config.Validate rejects.
func LoadRelay(environ []string) (Relay, error) {
	r := newReader(environ)
	v := relayVars()
	c := Relay{
		Common: r.common(),
		Config: relay.Config{
			MaxAttempts:           r.intRange(v["MaxAttempts"], 0, 1, math.MaxInt32),
			InitialBackoff:        r.duration(v["InitialBackoff"], 0, false),
			MaxBackoff:            r.duration(v["MaxBackoff"], 0, false),
			LockTimeout:           r.duration(v["LockTimeout"], 0, false),
			BatchSize:             r.intRange(v["BatchSize"], 0, 1, math.MaxInt32),
			PollInterval:          r.duration(v["PollInterval"], 0, false),
			PublishTimeout:        r.duration(v["PublishTimeout"], 0, false),
			Retention:             r.duration(v["Retention"], 0, true),
			ProbeMaxBackoff:       r.duration(v["ProbeMaxBackoff"], 0, false),
			Workers:               r.intRange(v["Workers"], 0, 1, math.MaxInt32),
			RetentionInterval:     r.duration(v["RetentionInterval"], 0, false),
			RetentionBatch:        r.intRange(v["RetentionBatch"], 0, 1, math.MaxInt32),
			ClaimFullScanInterval: r.duration(v["ClaimFullScanInterval"], 0, true),
			ClaimWatermarkMargin:  r.duration(v["ClaimWatermarkMargin"], 0, false),
			DBTimeout:             r.duration(v["DBTimeout"], 0, false),
		},
	}
	c.ListenURL = r.str("DATABASE_LISTEN_URL", c.DatabaseURL)
	if s, set := r.env[v["ClaimFullScanInterval"]]; set && s != "" && c.ClaimFullScanInterval == 0 {
		c.ClaimFullScanInterval = -1 // 0 turns the claim watermark off
	}
	if s, set := r.env[v["Retention"]]; set && s != "" && c.Retention == 0 {
		c.Retention = -1 // OUTBOX_RETENTION=0 disables the sweep
	}
	if r.err != nil {
		return c, r.err
	}
	var fe *relay.FieldError
	if err := c.Validate(); errors.As(err, &fe) {
		name, ok := v[fe.Field]
		if !ok {
			name = "OUTBOX_*"
		}
		return c, &Error{Var: name, Reason: fe.Reason}
	} else if err != nil {
		return c, err
	}
	c.Config = c.WithDefaults()
	return c, nil
}

// reader keeps the first error, so each Load reads top to bottom and reports
// the first bad variable.
type reader struct {
	env map[string]string
	err error
}

func newReader(environ []string) *reader {
	env := make(map[string]string, len(environ))
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	return &reader{env: env}
}

func (r *reader) fail(name, reason string) {
	if r.err == nil {
		r.err = &Error{Var: name, Reason: reason}
	}
}

func (r *reader) common() Common {
	return Common{
		DatabaseURL:             r.required("DATABASE_URL"),
		KafkaBootstrapServers:   r.required("KAFKA_BOOTSTRAP_SERVERS"),
		KafkaProperties:         r.kafkaProperties(KafkaPropertyPrefix),
		KafkaConsumerProperties: r.kafkaProperties(KafkaConsumerPropertyPrefix),
		KafkaProducerProperties: r.kafkaProperties(KafkaProducerPropertyPrefix),
		TopicInput:              r.str("TOPIC_INPUT", "pcp.request.survey-georeference.v1"),
		TopicInputDLQ:           r.str("TOPIC_INPUT_DLQ", "pcp.request.survey-georeference-dlq.v1"),
		TopicProcessedRoute:     r.str("TOPIC_PROCESSED_ROUTE", "pcp.route.in.v1"),
		TopicRouteGeoreference:  r.str("TOPIC_ROUTE_GEOREFERENCE", "pcp.route.georeference.v1"),
		HTTPAddr:                r.str("HTTP_ADDR", ":8080"),
		LogFormat:               r.oneOf("LOG_FORMAT", "json", "json", "text"),
		LogLevel:                r.level("LOG_LEVEL"),
		MessageKey:              r.oneOf("OUTBOX_MESSAGE_KEY", "traceId", "traceId", "routeId"),
	}
}

func (r *reader) required(name string) string {
	v := r.env[name]
	if strings.TrimSpace(v) == "" {
		r.fail(name, "required but not set")
	}
	return v
}

// str returns the variable, or def when it is unset or empty: an empty value
// in a Kubernetes manifest means "not set".
func (r *reader) str(name, def string) string {
	if v := r.env[name]; v != "" {
		return v
	}
	return def
}

func (r *reader) oneOf(name, def string, allowed ...string) string {
	v := r.str(name, def)
	for _, a := range allowed {
		if v == a {
			return v
		}
	}
	r.fail(name, fmt.Sprintf("%q is not one of %s", v, strings.Join(allowed, ", ")))
	return def
}

func (r *reader) level(name string) slog.Level {
	var l slog.Level
	if err := l.UnmarshalText([]byte(r.str(name, "info"))); err != nil {
		r.fail(name, fmt.Sprintf("%q is not a level (debug, info, warn, error)", r.env[name]))
	}
	return l
}

func (r *reader) intRange(name string, def, lo, hi int) int {
	s, ok := r.env[name]
	if !ok || s == "" {
		return def
	}
	v, err := strconv.Atoi(s)
	if err != nil {
		r.fail(name, fmt.Sprintf("%q is not an integer", s))
		return def
	}
	if v < lo || v > hi {
		r.fail(name, fmt.Sprintf("%d is outside [%d, %d]", v, lo, hi))
		return def
	}
	return v
}

func (r *reader) duration(name string, def time.Duration, zeroOK bool) time.Duration {
	s, ok := r.env[name]
	if !ok || s == "" {
		return def
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		r.fail(name, fmt.Sprintf("%q is not a duration (Go syntax, e.g. 500ms, 30s, 2m)", s))
		return def
	}
	if v < 0 || (v == 0 && !zeroOK) {
		r.fail(name, fmt.Sprintf("%s must be positive", s))
		return def
	}
	return v
}

func (r *reader) kafkaProperties(prefix string) map[string]string {
	props := map[string]string{}
	var keys []string
	for k := range r.env {
		if strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		name := strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(k, prefix), "_", "."))
		if name == "" {
			r.fail(k, "names no librdkafka property")
			continue
		}
		props[name] = r.env[k]
	}
	return props
}

// UsageError is a wrong command line (unknown subcommand or flag).
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return "usage: " + e.Msg }

// ExitCode maps the error a main's run returned to the process status:
// 0 success, 2 bad configuration or usage (fix the deployment, retrying will
// not help), 1 anything else.
func ExitCode(err error) int {
	var cfgErr *Error
	var usage *UsageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &cfgErr), errors.As(err, &usage):
		return 2
	}
	return 1
}

// Migrate is the configuration of `ingestor migrate`: it needs only the
// database, so a migration Job need not be given Kafka settings.
type Migrate struct {
	DatabaseURL string
	LogFormat   string
	LogLevel    slog.Level
}

// LoadMigrate reads the configuration of `ingestor migrate`.
func LoadMigrate(environ []string) (Migrate, error) {
	r := newReader(environ)
	c := Migrate{
		DatabaseURL: r.required("DATABASE_URL"),
		LogFormat:   r.oneOf("LOG_FORMAT", "json", "json", "text"),
		LogLevel:    r.level("LOG_LEVEL"),
	}
	return c, r.err
}

// LoadKafkaTool reads the settings of a tool that talks only to Kafka
// (`ingestor dlq-replay`): DATABASE_URL is neither required nor kept, so an
// operator's shell need not hold the database password.
func LoadKafkaTool(environ []string) (Common, error) {
	r := newReader(environ)
	r.env["DATABASE_URL"] = "unused"
	c := r.common()
	c.DatabaseURL = ""
	return c, r.err
}

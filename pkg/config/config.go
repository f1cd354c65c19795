// Package config reads the environment of contract §5 into one typed struct
// per binary and validates it at start, so that a wrong setting stops the
// process with one line naming the variable instead of failing later.
package config

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"strings"
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

// NameVariables tells an error about a librdkafka property (kafkax's
// PropertyError) which variables set it, so that the process's one line
// names them; other errors are returned as they are. consumer says which
// kind of client refused it: the other kind's variables did not reach it.
// When librdkafka's message names no property ("Unsupported SASL
// mechanism: X"), it is told every variable that reached the client: one
// of them, or their combination, was refused.
func (c Common) NameVariables(err error, consumer bool) error {
	var pe interface {
		PropertyNames() []string
		SetVariables(names ...string)
	}
	if !errors.As(err, &pe) {
		return err
	}
	own := KafkaProducerPropertyPrefix
	if consumer {
		own = KafkaConsumerPropertyPrefix
	}
	names := pe.PropertyNames()
	if len(names) == 0 {
		names = slices.Collect(maps.Keys(c.kafkaVars))
	}
	var vars []string
	for _, name := range names {
		for _, v := range c.kafkaVars[name] {
			if strings.HasPrefix(v, KafkaPropertyPrefix) || strings.HasPrefix(v, own) {
				vars = append(vars, v)
			}
		}
	}
	if len(vars) > 0 {
		sort.Strings(vars)
		pe.SetVariables(vars...)
	}
	return err
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
	// kafkaVars maps a property to the KAFKA_*PROPERTY_* variables that set
	// it, for NameVariables.
	kafkaVars map[string][]string
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
	// LogForceColor (FORCE_COLOR set) colours text logs that do not go to
	// a terminal: make run's binaries write to a pipe that ends on one.
	LogForceColor bool

	// MessageKey chooses the output record key: "traceId" (falling back to
	// routeId when the trace id is missing or empty) or "routeId"
	// (OUTBOX_MESSAGE_KEY). The ingestor applies it when it freezes the
	// outbox rows.
	MessageKey string
}

// The topics of contract §5 when their variables are unset. The dev tools
// (scripts/devrun, scripts/devwatch) follow the same defaults.
const (
	DefaultTopicInput             = "pcp.request.survey-georeference.v1"
	DefaultTopicInputDLQ          = "pcp.request.survey-georeference-dlq.v1"
	DefaultTopicProcessedRoute    = "pcp.route.in.v1"
	DefaultTopicRouteGeoreference = "pcp.route.georeference.v1"
)

// UsageError is a wrong command line (unknown subcommand or flag).
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return "usage: " + e.Msg }

// IsHelp reports whether a command-line argument asks for the usage text.
func IsHelp(arg string) bool {
	switch arg {
	case "help", "-h", "-help", "--help":
		return true
	}
	return false
}

// ExitCode maps the error a main's run returned to the process status:
// 0 success, 2 bad configuration or usage (fix the deployment, retrying will
// not help), 1 anything else.
func ExitCode(err error) int {
	var cfgErr *Error
	var usage *UsageError
	var setting settingError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &cfgErr), errors.As(err, &usage), errors.As(err, &setting):
		return 2
	}
	return 1
}

// settingError is an invalid setting found outside this package (store's
// connection string that does not parse); Setting names its variable.
type settingError interface {
	error
	Setting() string
}

// Migrate is the configuration of the commands that need only the
// database: `ingestor migrate` (so a migration Job need not be given Kafka
// settings) and `outbox-relay stats|requeue|pause|resume`.
type Migrate struct {
	DatabaseURL string
	LogFormat   string
	LogLevel    slog.Level
	// LogForceColor: as in Common.
	LogForceColor bool
}

// LoadMigrate reads the configuration of the database-only commands.
func LoadMigrate(environ []string) (Migrate, error) {
	r := newReader(environ)
	c := Migrate{
		DatabaseURL:   r.required("DATABASE_URL"),
		LogFormat:     r.oneOf("LOG_FORMAT", "json", "json", "text"),
		LogLevel:      r.level("LOG_LEVEL"),
		LogForceColor: r.str("FORCE_COLOR", "") != "",
	}
	// Checked as by the service binaries, which the README promises for
	// every command: the runtime took a bad GOGC for 100 without a word.
	r.goGC("GOGC")
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

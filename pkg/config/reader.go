package config

import (
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"time"
)

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

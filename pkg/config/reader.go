package config

import (
	"cmp"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/pcp/route-processing/pkg/passport"
	"github.com/pcp/route-processing/pkg/record"
)

// reader keeps the first error, so each Load reads top to bottom and reports
// the first bad variable.
type reader struct {
	env map[string]string
	err error
	// read: the variables asked for, set or not (UnknownVariables).
	read map[string]bool
	// kafkaVars: property → the KAFKA_*PROPERTY_* variables that set it.
	kafkaVars map[string][]string
}

func newReader(environ []string) *reader {
	env := make(map[string]string, len(environ))
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	return &reader{env: env, read: map[string]bool{}, kafkaVars: map[string][]string{}}
}

// get returns variable name's value and whether it is set, noting that
// it was asked for.
func (r *reader) get(name string) (string, bool) {
	r.read[name] = true
	v, ok := r.env[name]
	return v, ok
}

func (r *reader) fail(name, reason string) {
	if r.err == nil {
		r.err = &Error{Var: name, Reason: reason}
	}
}

func (r *reader) common() Common {
	c := Common{
		DatabaseURL:             r.required("DATABASE_URL"),
		KafkaBootstrapServers:   r.required("KAFKA_BOOTSTRAP_SERVERS"),
		KafkaProperties:         r.kafkaProperties(KafkaPropertyPrefix),
		KafkaConsumerProperties: r.kafkaProperties(KafkaConsumerPropertyPrefix),
		KafkaProducerProperties: r.kafkaProperties(KafkaProducerPropertyPrefix),
		TopicInput:              r.topic("TOPIC_INPUT", DefaultTopicInput),
		TopicInputDLQ:           r.topic("TOPIC_INPUT_DLQ", DefaultTopicInputDLQ),
		TopicProcessedRoute:     r.topic("TOPIC_PROCESSED_ROUTE", DefaultTopicProcessedRoute),
		TopicRouteGeoreference:  r.topic("TOPIC_ROUTE_GEOREFERENCE", DefaultTopicRouteGeoreference),
		HTTPAddr:                r.listenAddr("HTTP_ADDR", ":8080"),
		LogFormat:               r.oneOf("LOG_FORMAT", "json", "json", "text"),
		LogLevel:                r.level("LOG_LEVEL"),
		LogForceColor:           r.str("FORCE_COLOR", "") != "",
		MessageKey:              r.oneOf("OUTBOX_MESSAGE_KEY", passport.KeyTraceID, passport.KeyTraceID, passport.KeyRouteID),
	}
	c.kafkaVars = r.kafkaVars
	r.bootstrapServers("KAFKA_BOOTSTRAP_SERVERS", c.KafkaBootstrapServers, securityProtocols(c))
	r.distinctTopics(c)
	r.goGC("GOGC")
	return c
}

// goGC checks GOGC, which the Go runtime reads before the program starts
// (pkg/gctune applies the service's default when it is unset): "off", or
// a percentage. The runtime takes any other text, and a number beyond 32
// bits, for 100, and a negative number for off, without a word.
func (r *reader) goGC(name string) {
	v := r.str(name, "")
	if v == "" || v == "off" {
		return
	}
	if n, err := strconv.ParseInt(v, 10, 32); err != nil || n < 0 {
		r.fail(name, fmt.Sprintf("%q is neither off nor a percentage (a whole number, 0 or more)", v))
	}
}

// distinctTopics refuses a dead-letter or output topic that is the input
// topic (the ingestor would consume its own output: a dead-lettered record
// would come back and be dead-lettered again, forever) and an output topic
// that is the dead-letter topic. The two output topics may be one: their
// records carry the event type in the `type` header.
func (r *reader) distinctTopics(c Common) {
	switch {
	case c.TopicInputDLQ == c.TopicInput:
		r.fail("TOPIC_INPUT_DLQ", fmt.Sprintf("is the input topic (TOPIC_INPUT, %s)", c.TopicInput))
	case c.TopicProcessedRoute == c.TopicInput:
		r.fail("TOPIC_PROCESSED_ROUTE", fmt.Sprintf("is the input topic (TOPIC_INPUT, %s)", c.TopicInput))
	case c.TopicRouteGeoreference == c.TopicInput:
		r.fail("TOPIC_ROUTE_GEOREFERENCE", fmt.Sprintf("is the input topic (TOPIC_INPUT, %s)", c.TopicInput))
	case c.TopicProcessedRoute == c.TopicInputDLQ:
		r.fail("TOPIC_PROCESSED_ROUTE", fmt.Sprintf("is the dead-letter topic (TOPIC_INPUT_DLQ, %s)", c.TopicInputDLQ))
	case c.TopicRouteGeoreference == c.TopicInputDLQ:
		r.fail("TOPIC_ROUTE_GEOREFERENCE", fmt.Sprintf("is the dead-letter topic (TOPIC_INPUT_DLQ, %s)", c.TopicInputDLQ))
	}
}

func (r *reader) required(name string) string {
	v, _ := r.get(name)
	if strings.TrimSpace(v) == "" {
		r.fail(name, "required but not set")
	}
	return v
}

// str returns the variable, or def when it is unset or empty: an empty value
// in a Kubernetes manifest means "not set".
func (r *reader) str(name, def string) string {
	if v, _ := r.get(name); v != "" {
		return v
	}
	return def
}

// topic reads a Kafka topic name (record.CheckTopicName).
func (r *reader) topic(name, def string) string {
	v := r.str(name, def)
	if err := record.CheckTopicName(v); err != nil {
		r.fail(name, err.Error())
	}
	return v
}

// bootstrapServers checks a broker list: comma-separated host[:port]
// entries, each optionally prefixed with a protocol (SASL_SSL://host:9093)
// that every client's security.protocol must be, IPv6 hosts in brackets.
// librdkafka itself takes a malformed list without an error and then waits
// forever for brokers it cannot name.
func (r *reader) bootstrapServers(name, list string, securityProtocols []string) {
	if r.err != nil || strings.TrimSpace(list) == "" {
		return // already reported (required)
	}
	for i, entry := range strings.Split(list, ",") {
		entry = strings.TrimSpace(entry)
		if proto, rest, ok := strings.Cut(entry, "://"); ok {
			// librdkafka stops reading the list at an entry whose protocol
			// it does not take, or that is not security.protocol: that
			// entry and those after it are dropped, and with none left it
			// runs with no broker.
			if !brokerProtocols[strings.ToLower(proto)] {
				r.fail(name, fmt.Sprintf("entry %d has the protocol %q; librdkafka takes plaintext, ssl, sasl_plaintext or sasl_ssl (set security.protocol with KAFKA_PROPERTY_SECURITY_PROTOCOL)", i+1, proto))
				return
			}
			for _, sp := range securityProtocols {
				if !strings.EqualFold(proto, sp) {
					r.fail(name, fmt.Sprintf("entry %d has the protocol %q, but security.protocol is %q: librdkafka would drop it and the entries after it (set KAFKA_PROPERTY_SECURITY_PROTOCOL, or leave the prefix out)", i+1, proto, sp))
					return
				}
			}
			entry = rest
		}
		if entry == "" {
			r.fail(name, fmt.Sprintf("entry %d is empty", i+1))
			return
		}
		host, port, err := net.SplitHostPort(entry)
		if err != nil {
			if !strings.Contains(err.Error(), "missing port") {
				r.fail(name, fmt.Sprintf("entry %d (%q) is not host:port (an IPv6 host goes in brackets)", i+1, entry))
				return
			}
			// librdkafka's default port, 9092.
			host, port = strings.TrimSuffix(strings.TrimPrefix(entry, "["), "]"), ""
		}
		if !validBrokerHost(host) {
			r.fail(name, fmt.Sprintf("entry %d (%q) does not name a host (a DNS name or an IP address)", i+1, entry))
			return
		}
		if n, err := strconv.Atoi(port); port != "" && (err != nil || n < 1 || n > 65535) {
			r.fail(name, fmt.Sprintf("entry %d (%q) is not host:port with a port in 1–65535", i+1, entry))
			return
		}
	}
}

// securityProtocols are the security.protocol values, lower case, of the
// consumer and producer properties (librdkafka's default: plaintext).
func securityProtocols(c Common) []string {
	var out []string
	for _, props := range []map[string]string{c.ConsumerProperties(), c.ProducerProperties()} {
		p := strings.ToLower(cmp.Or(props["security.protocol"], "plaintext"))
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

// brokerProtocols are the prefixes librdkafka accepts on a bootstrap
// server, in lower case (it takes any letter case).
var brokerProtocols = map[string]bool{"plaintext": true, "ssl": true, "sasl_plaintext": true, "sasl_ssl": true}

// validBrokerHost reports whether host is an IP address (an IPv6 one
// with a zone too) or a DNS name: labels of letters, digits, '-' and '_',
// none empty or starting with '-', and an optional final dot. White space
// or other characters would make librdkafka retry a name no resolver
// answers.
func validBrokerHost(host string) bool {
	if _, err := netip.ParseAddr(host); err == nil {
		return true
	}
	labels := strings.Split(strings.TrimSuffix(host, "."), ".")
	for _, l := range labels {
		if l == "" || l[0] == '-' {
			return false
		}
		for _, c := range l {
			switch {
			case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_':
			default:
				return false
			}
		}
	}
	return true
}

// listenAddr reads an HTTP listen address, [host]:port with a port in
// 0–65535 (0: any free port). Whether it can be bound is found when the
// server starts.
func (r *reader) listenAddr(name, def string) string {
	v := r.str(name, def)
	_, port, err := net.SplitHostPort(v)
	if n, perr := strconv.Atoi(port); err != nil || perr != nil || n < 0 || n > 65535 {
		r.fail(name, fmt.Sprintf("%q is not [host]:port with a port in 0–65535", v))
	}
	return v
}

// nonBlank is str for a value that must hold more than white space (set,
// it is used as is).
func (r *reader) nonBlank(name, def string) string {
	v := r.str(name, def)
	if strings.TrimSpace(v) == "" {
		r.fail(name, "is only white space")
	}
	return v
}

// positiveInt reads an integer of at least 1, or 0 (the component's
// default) when unset; the upper bound is the component's rule, checked by
// its Validate.
func (r *reader) positiveInt(name string) int {
	s, ok := r.get(name)
	if !ok || s == "" {
		return 0
	}
	v, err := strconv.Atoi(s)
	if err != nil {
		r.fail(name, fmt.Sprintf("%q is not an integer", s))
		return 0
	}
	if v < 1 {
		r.fail(name, fmt.Sprintf("%d must be at least 1", v))
		return 0
	}
	return v
}

// oneOf takes one of allowed in any letter case and returns it as allowed
// spells it (LOG_FORMAT=JSON is json).
func (r *reader) oneOf(name, def string, allowed ...string) string {
	v := r.str(name, def)
	for _, a := range allowed {
		if strings.EqualFold(v, a) {
			return a
		}
	}
	r.fail(name, fmt.Sprintf("%q is not one of %s", v, strings.Join(allowed, ", ")))
	return def
}

// level takes slog's names (any letter case, with an offset such as "INFO+2")
// and "warning", which operators coming from other loggers write for warn.
func (r *reader) level(name string) slog.Level {
	s := r.str(name, "info")
	if strings.EqualFold(s, "warning") {
		s = "warn"
	}
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		r.fail(name, fmt.Sprintf("%q is not a level (debug, info, warn, error)", r.env[name]))
	}
	return l
}

func (r *reader) intRange(name string, def, lo, hi int) int {
	s, ok := r.get(name)
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
	s, ok := r.get(name)
	if !ok || s == "" {
		return def
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		r.fail(name, fmt.Sprintf("%q is not a duration (Go syntax, e.g. 500ms, 30s, 2m)", s))
		return def
	}
	switch {
	case v < 0 && zeroOK:
		r.fail(name, fmt.Sprintf("%s is negative (0 turns it off)", s))
		return def
	case v < 0 || (v == 0 && !zeroOK):
		r.fail(name, fmt.Sprintf("%s must be positive", s))
		return def
	}
	return v
}

func (r *reader) kafkaProperties(prefix string) map[string]string {
	props := map[string]string{}
	var keys []string
	for k, v := range r.env {
		// Empty counts as unset, as for every variable: librdkafka
		// refused "" for most properties, and a chart value left empty
		// made the process exit.
		if strings.HasPrefix(k, prefix) && v != "" {
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
		r.kafkaVars[name] = append(r.kafkaVars[name], k)
	}
	return props
}

// setInt parses the variable into dst when it is set; the range is the
// component's rule, checked by its Validate.
func (r *reader) setInt(name string, dst *int) {
	s, ok := r.get(name)
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
	s, ok := r.get(name)
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

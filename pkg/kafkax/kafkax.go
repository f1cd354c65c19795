// Package kafkax is the only importer of confluent-kafka-go. It turns the
// service's settings into librdkafka configurations, bridges librdkafka's
// logs into slog, and offers the few operations the service needs: an
// idempotent producer that reports per-message delivery for a batch, a
// consumer with manual offset commits, a group-less reader of offset ranges
// (dlq-replay), metadata probes, and error classification.
package kafkax

import (
	"log/slog"
	"sort"
	"strings"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// ClientConfig is what every client of the service shares.
type ClientConfig struct {
	// BootstrapServers is the broker list.
	BootstrapServers string
	// Properties are operator-supplied librdkafka properties (TLS, SASL,
	// tuning) that override the service's defaults, except those listed in
	// enforced by each client, under any of their names (see configMap).
	// Values may be secrets and are never logged.
	Properties map[string]string
	// ClientID names the client in broker logs and metrics.
	ClientID string
}

// clientDefaults are every client's (producer, consumer, reader) defaults
// for its broker connections; the operator's properties override them.
var clientDefaults = kafka.ConfigMap{
	// TCP_NODELAY on every broker connection, as the Java client and Go's
	// net package have it: under Nagle's algorithm a request written while
	// an earlier one on the connection is unacknowledged waits for that
	// ACK (a produce request behind the previous one's response, a
	// consumer's request behind a fetch the broker holds). The bundled
	// librdkafka 2.11.1 sets it by default (strace: TCP_NODELAY 1 on a
	// client left at its defaults), older releases documented false;
	// stated here, the setting does not depend on the librdkafka linked.
	"socket.nagle.disable": true,
	// The next three bound how long a client takes to notice that a broker
	// is back after a freeze or a blackhole.
	// librdkafka backs off reconnects up to 10s by default, so a broker
	// back from a freeze or a blackhole would wait that long to be asked
	// again; 1s keeps recovery within seconds (a reconnect is one TCP
	// handshake and an ApiVersion request).
	"reconnect.backoff.ms":     100,
	"reconnect.backoff.max.ms": 1000,
	// A connection attempt to a broker behind a blackhole can hang in SYN
	// retransmits (1s, 3s, 7s …) or on a request the link dropped long
	// after the broker is back; librdkafka's default abandons it only after
	// 30s. The bound covers the whole setup, ApiVersion round trip
	// included: 2s (until 2026-12-04) made no connection at all over a link
	// whose replies take 2 s or more (pkg/e2e kafka-slow-start), where 5s
	// still connects over 3-s replies, or TLS and SASL at a 1-s round trip,
	// and kept kafka-blackhole's recovery as it was (override with, e.g.,
	// KAFKA_PROPERTY_SOCKET_CONNECTION_SETUP_TIMEOUT_MS).
	"socket.connection.setup.timeout.ms": 5000,
}

// configMap builds a librdkafka configuration: clientDefaults and the
// client's defaults, then the operator's properties under their canonical
// names, then the enforced settings that the service's guarantees rest on
// (logging a warning, without the value, when an operator's property was
// overridden).
func configMap(logger *slog.Logger, cc ClientConfig, defaults, enforced kafka.ConfigMap) kafka.ConfigMap {
	m := kafka.ConfigMap{
		"bootstrap.servers": cc.BootstrapServers,
	}
	for k, v := range clientDefaults {
		m[k] = v
	}
	if cc.ClientID != "" {
		m["client.id"] = cc.ClientID
	}
	for k, v := range defaults {
		m[k] = v
	}
	keys := make([]string, 0, len(cc.Properties))
	for k := range cc.Properties {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		name := canonicalProperty(k)
		_, isEnforced := enforced[name]
		// transactional.id makes librdkafka refuse every message outside a
		// transaction ("Producing not allowed in transactional state"), and
		// the service's producer never begins one.
		if isEnforced || name == "transactional.id" {
			logger.Warn("kafka: ignoring property the service must control", "property", k)
			continue
		}
		// The broker list is KAFKA_BOOTSTRAP_SERVERS (contract §5), checked
		// when the configuration is read; a property would replace it
		// unchecked, without a word.
		if name == "bootstrap.servers" {
			logger.Warn("kafka: ignoring property; the broker list is KAFKA_BOOTSTRAP_SERVERS", "property", k)
			continue
		}
		// Set under several names, a property takes the value of its
		// canonical name, else of the name that sorts last: never the map's
		// random order.
		if _, both := cc.Properties[name]; both && name != k {
			logger.Warn("kafka: ignoring property also set under its canonical name", "property", k, "canonical", name)
			continue
		}
		m[name] = cc.Properties[k]
	}
	for k, v := range enforced {
		m[k] = v
	}
	return m
}

// propertyAliases maps each other name librdkafka accepts for a property
// to the one configMap keeps it under: the name this package sets it by,
// else librdkafka's own. confluent-kafka-go applies a ConfigMap in Go's
// random map order, so one property under two names would get either value,
// and an alias would slip past the enforced settings. These are the
// _RK_C_ALIAS entries of src/rdkafka_conf.c in librdkafka 2.11.1, which
// confluent-kafka-go v2.11.1 bundles ("Alias for" in its CONFIGURATION.md),
// global and topic-level (a global configuration takes both), except the
// topic-level enable.auto.commit, which the global property of that name
// shadows. Re-check them when upgrading confluent-kafka-go.
var propertyAliases = map[string]string{
	"metadata.broker.list":      "bootstrap.servers",
	"max.in.flight":             "max.in.flight.requests.per.connection",
	"queue.buffering.max.ms":    "linger.ms",
	"compression.codec":         "compression.type",
	"request.required.acks":     "acks",
	"delivery.timeout.ms":       "message.timeout.ms",
	"retries":                   "message.send.max.retries",
	"max.partition.fetch.bytes": "fetch.message.max.bytes",
	"sasl.mechanism":            "sasl.mechanisms",
	"sasl.oauthbearer.client.credentials.client.id":     "sasl.oauthbearer.client.id",
	"sasl.oauthbearer.client.credentials.client.secret": "sasl.oauthbearer.client.secret",
}

// globalTopicProperties are librdkafka's global properties whose names
// begin with "topic." (2.11.1, as above).
var globalTopicProperties = map[string]bool{
	"topic.blacklist":                         true,
	"topic.metadata.propagation.max.ms":       true,
	"topic.metadata.refresh.fast.cnt":         true,
	"topic.metadata.refresh.fast.interval.ms": true,
	"topic.metadata.refresh.interval.ms":      true,
	"topic.metadata.refresh.sparse":           true,
}

// canonicalProperty returns the name configMap keeps an operator's
// property name under.
func canonicalProperty(name string) string {
	// librdkafka sets a name that is no global property on the default
	// topic configuration, which drops a "topic." prefix
	// (rd_kafka_conf_set), so "topic.acks" is acks. (A "topic." name of a
	// global-only property, which librdkafka would reject, becomes that
	// property.)
	if rest, ok := strings.CutPrefix(name, "topic."); ok && !globalTopicProperties[name] {
		name = rest
	}
	if canonical, ok := propertyAliases[name]; ok {
		return canonical
	}
	return name
}

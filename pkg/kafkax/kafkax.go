// Package kafkax is the only importer of confluent-kafka-go. It turns the
// service's settings into librdkafka configurations, bridges librdkafka's
// logs into slog, and offers the few operations the service needs: an
// idempotent producer that reports per-message delivery for a batch, a
// consumer with manual offset commits, a group-less reader of offset ranges
// (dlq-replay), metadata probes, and error classification.
package kafkax

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/pcp/route-processing/pkg/record"
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

// bridgeLogs forwards librdkafka's log lines into slog through a channel
// that it puts into the configuration. confluent-kafka-go never closes a
// channel it was given, so the caller calls the returned stop after the
// client's Close; until then the forwarding goroutine runs.
func bridgeLogs(logger *slog.Logger, m kafka.ConfigMap, client string) (stop func()) {
	ch := make(chan kafka.LogEvent, 256)
	m["go.logs.channel.enable"] = true
	m["go.logs.channel"] = ch
	setupBound := m["socket.connection.setup.timeout.ms"]
	go func() {
		var rep repeats
		for e := range ch {
			ok, held := rep.allow(messageKey(e.Tag, e.Message), time.Now())
			if !ok {
				continue
			}
			attrs := []any{"client", client, "tag", e.Tag, "name", e.Name}
			if held > 0 {
				attrs = append(attrs, "repeated", held)
			}
			if strings.Contains(e.Message, "Connection setup timed out") {
				// Over a link slower than the bound no connection is ever
				// made; the line alone does not say what to change.
				attrs = append(attrs, "hint", fmt.Sprintf("a broker connection must be set up (TCP, TLS, SASL, ApiVersion) within socket.connection.setup.timeout.ms, %v ms here; if the brokers are up and the link is slow, raise it with KAFKA_PROPERTY_SOCKET_CONNECTION_SETUP_TIMEOUT_MS", setupBound))
			}
			// syslog levels: 0-3 error, 4 warning, 5-6 info, 7 debug.
			lvl := slog.LevelDebug
			switch {
			case e.Level <= 3:
				lvl = slog.LevelError
			case e.Level == 4:
				lvl = slog.LevelWarn
			case e.Level <= 6:
				lvl = slog.LevelInfo
			}
			logger.Log(context.Background(), lvl, "librdkafka: "+strings.TrimSpace(e.Message), attrs...)
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(ch) }) }
}

// toRecord converts a consumed message; topic is used when the message
// names none. It is the one place that maps librdkafka's timestamp types to
// the names Kafka's Java client uses.
func toRecord(topic string, m *kafka.Message) record.Record {
	r := record.Record{
		Topic:     topic,
		Partition: m.TopicPartition.Partition,
		Offset:    int64(m.TopicPartition.Offset),
		Key:       m.Key,
		Value:     m.Value,
	}
	if m.TopicPartition.Topic != nil {
		r.Topic = *m.TopicPartition.Topic
	}
	if len(m.Headers) > 0 {
		r.Headers = make([]record.Header, len(m.Headers))
		for i, h := range m.Headers {
			r.Headers[i] = record.Header{Key: h.Key, Value: h.Value}
		}
	}
	switch m.TimestampType {
	case kafka.TimestampCreateTime:
		r.TimestampType, r.Timestamp = record.TimestampCreateTime, m.Timestamp
	case kafka.TimestampLogAppendTime:
		r.TimestampType, r.Timestamp = record.TimestampLogAppendTime, m.Timestamp
	default:
		r.TimestampType = record.TimestampNone
	}
	return r
}

// topicMissing returns a *record.TopicError when md lacks topic or holds it
// with an error of the topic's own (unknown, not authorised, still being
// created; partition-level errors are not looked at): the brokers
// answered, but the topic cannot be used.
func topicMissing(md *kafka.Metadata, topic string) error {
	tm, ok := md.Topics[topic]
	if !ok {
		return &record.TopicError{Topic: topic, Err: errors.New("not in the brokers' answer")}
	}
	if tm.Error.Code() != kafka.ErrNoError {
		return &record.TopicError{Topic: topic, Err: tm.Error}
	}
	return nil
}

// metadataClient is the metadata request of librdkafka's clients, producer
// and consumer alike.
type metadataClient interface {
	GetMetadata(topic *string, allTopics bool, timeoutMs int) (*kafka.Metadata, error)
}

// probe asks client for topic's metadata (the cluster's alone when topic
// is ""), bounded by timeout and ctx: an answer that lists no broker is
// record.ErrUnavailable, one without the topic a *record.TopicError
// (topicMissing).
func probe(ctx context.Context, client metadataClient, topic string, timeout time.Duration) error {
	ms, err := metadataWait(ctx, timeout)
	if err != nil {
		return err
	}
	var tp *string
	if topic != "" {
		tp = &topic
	}
	md, err := client.GetMetadata(tp, false, ms)
	if err != nil {
		return fmt.Errorf("kafka metadata: %w", err)
	}
	if len(md.Brokers) == 0 {
		return fmt.Errorf("kafka metadata: no brokers: %w", record.ErrUnavailable)
	}
	if topic != "" {
		return topicMissing(md, topic)
	}
	return nil
}

// metadataWait is the wait, in the whole milliseconds librdkafka takes, of
// a metadata request bounded by timeout and by ctx's deadline; ctx's error
// when ctx is done or its deadline has come.
func metadataWait(ctx context.Context, timeout time.Duration) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if dl, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(dl))
	}
	if timeout <= 0 {
		return 0, context.DeadlineExceeded
	}
	return max(int(timeout.Milliseconds()), 1), nil
}

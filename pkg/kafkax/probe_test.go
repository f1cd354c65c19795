package kafkax

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pcp/route-processing/pkg/record"
	"github.com/pcp/route-processing/pkg/testenv"
)

// A probe of a topic the brokers do not have fails with a *record.TopicError
// naming it, so that readiness says which topic is missing, not that the
// brokers are unreachable; the brokers alone, and a topic they have, pass.
func TestProbeNamesAMissingTopic(t *testing.T) {
	t.Parallel()
	bootstrap := testenv.KafkaBootstrap(t)
	existing := testenv.Topic(t, "probe", 1)
	missing := "probe-missing-" + uuid.NewString()[:8]
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	requireMissing := func(err error) {
		t.Helper()
		var topicErr *record.TopicError
		require.True(t, errors.As(err, &topicErr), "a TopicError: %v", err)
		require.Equal(t, missing, topicErr.Topic)
		require.Contains(t, err.Error(), missing)
	}

	c, err := NewConsumer(logger, ConsumerConfig{
		ClientConfig: ClientConfig{BootstrapServers: bootstrap, ClientID: "probe-test"},
		GroupID:      "probe-" + missing, Topic: missing,
	})
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Close()) }()
	requireMissing(c.Probe(ctx, 5*time.Second))

	p := noAutoCreateProducer(t, logger, bootstrap, "probe-test")
	requireMissing(p.Probe(ctx, missing, 5*time.Second))
	require.NoError(t, p.Probe(ctx, existing, 5*time.Second))
	require.NoError(t, p.Probe(ctx, "", 5*time.Second))
}

// WarnMissingTopics warns once for each topic the brokers answer without,
// naming it and its variable, and says nothing of a topic they have.
func TestWarnMissingTopics(t *testing.T) {
	t.Parallel()
	bootstrap := testenv.KafkaBootstrap(t)
	existing := testenv.Topic(t, "warn-topic", 1)
	missing := "warn-missing-" + uuid.NewString()[:8]
	var logs testenv.SyncBuffer
	logger := slog.New(slog.NewJSONHandler(&logs, nil))
	p := noAutoCreateProducer(t, logger, bootstrap, "warn-topics-test")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	p.WarnMissingTopics(ctx, []TopicUse{
		{Name: existing, Var: "TOPIC_A", Effect: "a"},
		{Name: missing, Var: "TOPIC_B", Effect: "b waits"},
	})
	require.NoError(t, ctx.Err(), "the check did not end while the brokers answer")
	warnings := topicWarnings(t, logs.String())
	require.Len(t, warnings, 1, logs.String())
	require.Equal(t, missing, warnings[0]["topic"])
	require.Equal(t, "TOPIC_B", warnings[0]["variable"])
	require.Equal(t, "b waits", warnings[0]["effect"])
}

// A topic the check itself makes the brokers create (topic creation on, the
// default of librdkafka and Apache Kafka) is not warned of: right after its
// creation it may answer "leader not available", which is asked again.
func TestWarnMissingTopicsCreatedOnDemand(t *testing.T) {
	t.Parallel()
	bootstrap := testenv.KafkaBootstrap(t)
	var logs testenv.SyncBuffer
	p, err := NewProducer(slog.New(slog.NewJSONHandler(&logs, nil)), ProducerConfig{
		ClientConfig:    ClientConfig{BootstrapServers: bootstrap, ClientID: "warn-topics-test"},
		DeliveryTimeout: 5 * time.Second,
	})
	require.NoError(t, err)
	defer p.Close(time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	created := "warn-created-" + uuid.NewString()[:8]
	p.WarnMissingTopics(ctx, []TopicUse{{Name: created, Var: "TOPIC_C", Effect: "c"}})
	require.NoError(t, ctx.Err())
	require.Empty(t, topicWarnings(t, logs.String()), logs.String())
	require.NoError(t, p.Probe(ctx, created, 5*time.Second), "the brokers created the topic")
}

// noAutoCreateProducer is a producer of bootstrap's brokers, closed with
// the test, that does not ask them to create the topics it names
// (allow.auto.create.topics=false): the dev broker, as Apache Kafka by
// default, would otherwise create a topic for the producer's metadata
// request.
func noAutoCreateProducer(t *testing.T, logger *slog.Logger, bootstrap, clientID string) *Producer {
	t.Helper()
	p, err := NewProducer(logger, ProducerConfig{
		ClientConfig: ClientConfig{BootstrapServers: bootstrap, ClientID: clientID,
			Properties: map[string]string{"allow.auto.create.topics": "false"}},
		DeliveryTimeout: 5 * time.Second,
	})
	require.NoError(t, err)
	t.Cleanup(func() { p.Close(time.Second) })
	return p
}

// topicWarnings returns the JSON log lines of WarnMissingTopics' warning.
func topicWarnings(t *testing.T, logs string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(logs), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &m), line)
		if m["level"] == "WARN" && strings.Contains(m["msg"].(string), "a topic this process writes to cannot be used") {
			out = append(out, m)
		}
	}
	return out
}

package main

import (
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	svcconfig "github.com/pcp/route-processing/pkg/config"
	"github.com/pcp/route-processing/pkg/kafkax"
)

// The Kafka clients the bench itself runs, and the one home of their
// settings: the latency figures must not include a wait of the bench's own
// (issue 13, item 1), and the report states what each phase used
// (clientSettings).

// benchFetchMaxWait is the output consumer's fetch.wait.max.ms: franz-go's
// minimum. A fetch returns as soon as one record is there (fetch.min.bytes
// 1); the bound only matters if a broker parks a fetch until its wait
// ends.
const benchFetchMaxWait = 10 * time.Millisecond

// relayProducerLinger is the linger.ms of the relay's producer, for the
// producers standing in for it (the relay ceiling, the floor's second hop):
// 0, as pkg/relay's ProducerLinger on the relay helper's branch (2 ms on
// main before it). BENCH_RELAY_LINGER measures another.
func relayProducerLinger() time.Duration {
	if v := os.Getenv("BENCH_RELAY_LINGER"); v != "" {
		if d, err := time.ParseDuration(v); err == nil && d >= 0 {
			return d
		}
	}
	return 0
}

// inputProducerOpts are added to pkg/e2e's producer (franz-go: idempotent,
// acks=all by default) for the latency phases: no linger, so that a send
// time is when the record left.
func inputProducerOpts() []kgo.Opt {
	return []kgo.Opt{kgo.ProducerLinger(0)}
}

// outputConsumer reads topics from their start without a group; the time a
// record is returned by PollFetches is its receive time.
func (b *bench) outputConsumer(topics ...string) (*kgo.Client, error) {
	return kgo.NewClient(kgo.SeedBrokers(b.bootstrap), kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(benchFetchMaxWait), kgo.FetchMinBytes(1))
}

// relayProducer is a producer with the relay's settings (pkg/kafkax:
// idempotent, acks=all, in-flight 5, kafkax.Compression,
// batch.num.messages 10000; the relay's Kafka properties from its
// environment; linger.ms relayProducerLinger).
func (b *bench) relayProducer(clientID string) (*kafkax.Producer, error) {
	cfg := b.relayConfig()
	return kafkax.NewProducer(quietLogger(), kafkax.ProducerConfig{
		ClientConfig:    kafkax.ClientConfig{BootstrapServers: b.bootstrap, Properties: cfg.ProducerProperties(), ClientID: clientID},
		DeliveryTimeout: cfg.Config.WithDefaults().PublishTimeout,
		Linger:          relayProducerLinger(),
	})
}

// relayConfig is the relay's configuration under the bench's environment,
// read through pkg/config as bin/outbox-relay reads it.
func (b *bench) relayConfig() svcconfig.Relay {
	cfg, err := svcconfig.LoadRelay(b.serviceEnv("postgres://bench/unused", topicInput, topicOut1, topicOut2))
	if err != nil {
		b.t.Fatalf("bench: relay configuration: %v", err)
	}
	return cfg
}

// ingestorConsumer is a group consumer of topic with the ingestor's
// settings (pkg/kafkax, the ingestor's Kafka properties; librdkafka's
// fetch.wait.max.ms 500 and fetch.min.bytes 1, so a fetch returns when one
// record is there).
func (b *bench) ingestorConsumer(group, topic string) (*kafkax.Consumer, error) {
	cfg := b.ingestorConfig()
	return kafkax.NewConsumer(quietLogger(), kafkax.ConsumerConfig{
		ClientConfig: kafkax.ClientConfig{BootstrapServers: b.bootstrap, Properties: cfg.ConsumerProperties(), ClientID: "bench-floor"},
		GroupID:      group, Topic: topic,
	})
}

// quietLogger keeps librdkafka's chatter out of the bench's output; errors
// still show.
func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
}

// clientSettings describes, for the report, the clients of each phase.
func clientSettings() []string {
	l := relayProducerLinger().Milliseconds()
	return []string{
		"**ingest**: the input topic is pre-filled before any timing (pkg/e2e's franz-go producer, linger.ms 2, idempotent, acks=all); the ingestor's own consumer reads it.",
		fmt.Sprintf("**latency** and **floor**: input producer franz-go, linger.ms 0, idempotent, acks=all (franz-go defaults), max 20,000 buffered records; output consumer franz-go without a group, fetch.wait.max.ms %d (franz-go's minimum), fetch.min.bytes 1, from the start of the output topics.", benchFetchMaxWait.Milliseconds()),
		fmt.Sprintf("**floor** middle (standing in for both binaries): consumer pkg/kafkax with the ingestor's properties (librdkafka: fetch.wait.max.ms 500, fetch.min.bytes 1, cooperative-sticky group); producer pkg/kafkax with the relay's properties (idempotent, acks=all, max.in.flight 5, %s, linger.ms %d); it forwards what it has polled at once, two records per input record (one per output topic), one ProduceBatch per poll drain.", kafkax.Compression, l),
		fmt.Sprintf("**relay ceiling**: pkg/kafkax producer with the relay's properties (idempotent, acks=all, max.in.flight 5, %s, batch.num.messages 10,000, linger.ms %d), the same payloads, keys, headers and topics as the outbox rows.", kafkax.Compression, l),
		"**ingest ceiling**: no Kafka; pgx connections to the same cluster (fsync, synchronous_commit, full_page_writes on).",
	}
}

package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/pcp/route-processing/pkg/config"
	"github.com/pcp/route-processing/pkg/gctune"
	"github.com/pcp/route-processing/pkg/ingest"
	"github.com/pcp/route-processing/pkg/kafkax"
	"github.com/pcp/route-processing/pkg/obs"
	"github.com/pcp/route-processing/pkg/shutdown"
	"github.com/pcp/route-processing/pkg/store"
	"github.com/pcp/route-processing/pkg/tracing"
)

// runIngest wires bin/ingestor: the HTTP listener, tracing and the Kafka
// clients first (an address or a setting they refuse stops the process
// before anything is logged), then HTTP serves (so /healthz and /metrics
// answer before Kafka or PostgreSQL are reachable), the pool, and the
// ingest loop until ctx ends.
func runIngest(ctx context.Context, environ []string, stderr io.Writer) error {
	cfg, err := config.LoadIngestor(environ)
	if err != nil {
		return err
	}
	if err := store.CheckURL(cfg.DatabaseURL, "DATABASE_URL"); err != nil {
		return err
	}
	// Bound first, served later: an address in use stops the process with
	// its one line before the Kafka clients have connected anywhere.
	ln, err := obs.Listen(cfg.HTTPAddr)
	if err != nil {
		return err
	}
	defer ln.Close() // on a return before Serve; closing twice is harmless
	// Every step of the stop draws on what is left of the contract's 30 s.
	stopClock := shutdown.Start(ctx)
	base := obs.NewLogger(stderr, cfg.LogFormat, cfg.LogLevel, cfg.LogForceColor)
	logger := base.With("component", "ingest")
	reg := obs.NewRegistry()
	ready := obs.NewReadiness(reg, "route_passport_ingest")
	metrics := ingest.NewMetrics(reg)

	// Tracing is off unless an OTLP endpoint is configured (OTEL_*).
	tp, err := tracing.New(ctx, base, "route-passport-ingestor", tracing.BuildVersion())
	if err != nil {
		return err
	}
	defer func() {
		// Flush what the last batches traced.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stopClock.Left(5*time.Second))
		defer cancel()
		if err := tp.Shutdown(sctx); err != nil {
			logger.Warn("flushing traces", "err", err)
		}
	}()
	if tp.Enabled {
		cfg.Ingest.Tracer = tp.Tracer("github.com/pcp/route-processing/pkg/ingest")
	}

	// Created before anything is logged or served, so that a property
	// librdkafka refuses stops the process with its one line (both start
	// connecting in the background as soon as they exist).
	client := kafkax.ClientConfig{
		BootstrapServers: cfg.KafkaBootstrapServers,
		Properties:       cfg.ConsumerProperties(),
		ClientID:         "route-passport-ingestor",
	}
	consumer, err := kafkax.NewConsumer(logger, kafkax.ConsumerConfig{ClientConfig: client, GroupID: cfg.ConsumerGroup, Topic: cfg.TopicInput})
	if err != nil {
		return cfg.NameVariables(err, true)
	}
	// Closed with a bound after Run; on the way out before it, here.
	closeAfterRun := false
	defer func() {
		if !closeAfterRun {
			_ = consumer.Close()
		}
	}()
	client.Properties = cfg.ProducerProperties()
	producer, err := kafkax.NewProducer(logger, kafkax.ProducerConfig{ClientConfig: client})
	if err != nil {
		return cfg.NameVariables(err, false)
	}
	// Not flushed: once Run has returned, a dead letter still in the
	// producer belongs to a batch that gave up waiting for it, whose
	// offsets were not committed, so the next owner of the partition
	// dead-letters the record again; delivering it now would only write
	// the letter twice. What is queued is dropped, a request in flight
	// abandoned.
	defer producer.Close(0)
	gctune.Apply(environ, "/sys/fs/cgroup").Log(ctx, logger)
	config.WarnUnknown(ctx, logger, environ)

	// Not ready until PostgreSQL and a broker were reached: registered
	// before HTTP serves, so that no /readyz answers 200 in between.
	ingest.SetNotReadyYet(ready)

	httpCtx, stopHTTP := context.WithCancel(context.WithoutCancel(ctx))
	defer stopHTTP()
	httpErr := obs.Serve(httpCtx, logger, ln, obs.Handler(reg, ready))

	// pgxpool connects lazily: Open fails only on a malformed URL, so the
	// process starts (not ready) while the database is down.
	pool, err := store.Open(ctx, cfg.DatabaseURL, "route-passport-ingestor")
	if err != nil {
		return err
	}
	defer func() {
		// Bounded: a hung server never takes its connections back (see
		// store.ClosePool).
		wait := stopClock.Left(store.PoolCloseWait)
		if !store.ClosePool(pool, wait) {
			logger.Warn("database connections did not close in time; dropping them", "waited", wait)
		}
	}()
	passports := store.NewPassports(pool, cfg.OutboxMaxAttempts)
	// Info, not a warning: most often a redelivery (after a crash, a lost
	// membership, a replay from older offsets) of records already
	// superseded, which is as it should be.
	passports.KeptOut = func(ctx context.Context, routes int64) {
		logger.InfoContext(ctx, "routes not written: their rows already hold a later record of the same topic and partition, written after these were produced "+
			"(a redelivery or replay of records since superseded, or a late write of a partition this ingestor no longer owns; after the topic was recreated, see README, Consumer group)",
			"routes", routes)
	}

	// ingest.New adds component=ingest itself.
	in, err := ingest.New(base, cfg.Ingest, consumer, passports,
		producer, metrics, ready)
	if err != nil {
		return err
	}
	logger.Info("starting", "topic", cfg.TopicInput, "group", cfg.ConsumerGroup, "dlq", cfg.TopicInputDLQ,
		"batch_size", cfg.Ingest.BatchSize, "batch_max_wait", cfg.Ingest.BatchMaxWait,
		"db_timeout", in.DBTimeout(), "tracing", tp.Enabled,
		// Names only, never values: they may be secrets.
		"consumer_properties", slices.Sorted(maps.Keys(cfg.ConsumerProperties())),
		"producer_properties", slices.Sorted(maps.Keys(cfg.ProducerProperties())))

	// Ends with this function, not only with ctx: Run may return an error.
	topicsCtx, stopTopics := context.WithCancel(ctx)
	defer stopTopics()
	go producer.WarnMissingTopics(topicsCtx, []kafkax.TopicUse{{Name: cfg.TopicInputDLQ, Var: "TOPIC_INPUT_DLQ",
		Effect: "the first invalid record pauses consumption until the topic exists"}})

	closeAfterRun = true
	runErr := in.Run(ctx)
	closeConsumer(logger, consumer, stopClock.Left(consumerCloseTimeout))
	stopHTTP()
	if err := <-httpErr; err != nil && runErr == nil {
		runErr = fmt.Errorf("http: %w", err)
	}
	if runErr != nil {
		return fmt.Errorf("ingest: %w", runErr)
	}
	logger.Info("stopped")
	return nil
}

// consumerCloseTimeout bounds leaving the group (cut by the stop's clock).
const consumerCloseTimeout = 5 * time.Second

// closeConsumer closes consumer, waiting at most wait. Close leaves the
// group; the revocation it triggers commits nothing new (Run already
// committed what was finished). A consumer that hit a fatal error (e.g. a
// fenced static member) may never finish closing; exiting anyway loses
// nothing, and lets Kubernetes restart the pod.
func closeConsumer(logger *slog.Logger, consumer *kafkax.Consumer, wait time.Duration) {
	closed := make(chan error, 1)
	go func() { closed <- consumer.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			logger.Warn("closing the consumer", "err", err)
		}
	case <-time.After(wait):
		logger.Error("the consumer did not close in time; exiting without it", "timeout", wait)
	}
}

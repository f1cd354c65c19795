package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/pcp/route-processing/pkg/config"
	"github.com/pcp/route-processing/pkg/gctune"
	"github.com/pcp/route-processing/pkg/kafkax"
	"github.com/pcp/route-processing/pkg/obs"
	"github.com/pcp/route-processing/pkg/relay"
	"github.com/pcp/route-processing/pkg/shutdown"
	"github.com/pcp/route-processing/pkg/store"
	"github.com/pcp/route-processing/pkg/tracing"
)

// runRelay wires the relay: the HTTP listener, tracing and the producer
// first (an address or a setting they refuse stops the process before
// anything is logged), then HTTP serves (so /healthz and /metrics answer
// before Kafka or PostgreSQL do), the pool, the LISTEN connection and the
// relay's loops.
func runRelay(ctx context.Context, environ []string, stderr io.Writer) error {
	cfg, err := config.LoadRelay(environ)
	if err != nil {
		return err
	}
	if err := store.CheckURL(cfg.DatabaseURL, "DATABASE_URL"); err != nil {
		return err
	}
	if err := store.CheckURL(cfg.ListenURL, "DATABASE_LISTEN_URL"); err != nil {
		return err
	}
	// Bound first, served later: an address in use stops the process with
	// its one line before the producer has connected anywhere.
	ln, err := obs.Listen(cfg.HTTPAddr)
	if err != nil {
		return err
	}
	defer ln.Close() // on a return before Serve; closing twice is harmless
	// Every step of the stop draws on what is left of the contract's 30 s.
	stopClock := shutdown.Start(ctx)
	logger := obs.NewLogger(stderr, cfg.LogFormat, cfg.LogLevel, cfg.LogForceColor)
	log := logger.With("component", "relay")
	reg := obs.NewRegistry()
	ready := obs.NewReadiness(reg, "route_passport_outbox_relay")
	ready.Set(relay.ComponentPostgres, "starting")
	ready.Set(relay.ComponentKafka, "starting")

	// Tracing and the producer are set up before anything is logged or
	// served, so that a setting they refuse stops the process with its one
	// line (the producer starts connecting at once: tracing goes first).
	// Tracing is off unless an OTLP endpoint is configured
	// (OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT, see tracing.New); spans still
	// in the exporter's queue are flushed at exit.
	tp, err := tracing.New(ctx, logger, "outbox-relay", tracing.BuildVersion())
	if err != nil {
		return err
	}
	defer func() {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stopClock.Left(5*time.Second))
		defer cancel()
		if err := tp.Shutdown(fctx); err != nil {
			log.Warn("flush traces", "err", err)
		}
	}()

	producer, err := kafkax.NewProducer(logger, kafkax.ProducerConfig{
		ClientConfig: kafkax.ClientConfig{
			BootstrapServers: cfg.KafkaBootstrapServers,
			Properties:       cfg.ProducerProperties(),
			ClientID:         "pcp-outbox-relay",
		},
		DeliveryTimeout: cfg.PublishTimeout,
		Linger:          relay.ProducerLinger,
	})
	if err != nil {
		return cfg.NameVariables(err, false)
	}
	// Not flushed: once the relay has stopped, a record still in the
	// producer is one whose batch gave up waiting (its row given back, or
	// its lease left to lapse), never marked PUBLISHED, so the next claim
	// publishes it again anyway; delivering it now would only publish it
	// twice. What is queued is dropped, a request in flight abandoned.
	defer producer.Close(0)

	gctune.Apply(environ, "/sys/fs/cgroup").Log(ctx, log)
	config.WarnUnknown(ctx, log, environ)

	// HTTP outlives ctx until the relay has stopped, so /metrics can be
	// scraped during the drain.
	httpCtx, stopHTTP := context.WithCancel(context.WithoutCancel(ctx))
	defer stopHTTP()
	httpErr := obs.Serve(httpCtx, log, ln, obs.Handler(reg, ready))

	pool, err := store.Open(ctx, cfg.DatabaseURL, "pcp-outbox-relay") // connects lazily
	if err != nil {
		return err
	}
	defer func() {
		wait := stopClock.Left(store.PoolCloseWait)
		if !store.ClosePool(pool, wait) {
			log.Warn("database connections did not close in time; dropping them", "waited", wait)
		}
	}()

	rc := cfg.Config
	rc.Registerer, rc.Readiness = reg, ready
	if tp.Enabled {
		rc.Tracer = tp.Tracer("github.com/pcp/route-processing/pkg/relay")
	}
	r, err := relay.New(logger, store.NewOutbox(pool), producer, rc)
	if err != nil {
		return err
	}
	logStart(log, cfg, tp.Enabled)
	err = serve(ctx, log, cfg, r, producer, httpErr)
	log.Info("stopped")
	return err
}

// logStart logs the settings the relay runs with. kafka_properties lists
// the producer's property names (KAFKA_PROPERTY_* and
// KAFKA_PRODUCER_PROPERTY_*), never their values: they may be secrets.
func logStart(log *slog.Logger, cfg config.Relay, tracing bool) {
	retention := any(cfg.Retention)
	if cfg.Retention < 0 {
		retention = "off" // OUTBOX_RETENTION=0
	}
	log.Info("starting", "batch_size", cfg.BatchSize, "poll_interval", cfg.PollInterval,
		"lock_timeout", cfg.LockTimeout, "publish_timeout", cfg.PublishTimeout, "max_attempts", cfg.MaxAttempts,
		"kafka_properties", slices.Sorted(maps.Keys(cfg.ProducerProperties())), "db_timeout", cfg.DBTimeout,
		"retention", retention, "retention_interval", cfg.RetentionInterval, "retention_batch", cfg.RetentionBatch,
		"direct_listen_url", cfg.ListenURL != cfg.DatabaseURL, "tracing", tracing)
}

// serve runs the relay until ctx ends or its HTTP server dies, with the
// check of its output topics and the LISTEN connection beside it.
func serve(ctx context.Context, log *slog.Logger, cfg config.Relay, r *relay.Relay, producer *kafkax.Producer, httpErr <-chan error) (err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The rows name their topics; these are the ones the contract's events
	// go to (the ingestors' settings, which the relay's should match).
	const effect = "rows for it count an attempt per try and end FAILED"
	go producer.WarnMissingTopics(ctx, []kafkax.TopicUse{
		{Name: cfg.TopicProcessedRoute, Var: "TOPIC_PROCESSED_ROUTE", Effect: effect},
		{Name: cfg.TopicRouteGeoreference, Var: "TOPIC_ROUTE_GEOREFERENCE", Effect: effect},
	})
	listenDone := make(chan struct{})
	go func() {
		defer close(listenDone)
		if err := store.Listen(ctx, log, cfg.ListenURL, time.Second, r.Notified, func() { r.Connected(ctx) }, r.Relisten()); err != nil && ctx.Err() == nil {
			log.Error("outbox listener stopped; polling only", "err", err)
		}
	}()

	runErr := make(chan error, 1)
	go func() { runErr <- r.Run(ctx) }()
	select {
	case err = <-runErr:
	case herr := <-httpErr:
		// The HTTP server died: /healthz would fail and the pod be killed
		// anyway; stop cleanly instead.
		if herr == nil {
			herr = errors.New("stopped")
		}
		cancel()
		<-runErr
		err = fmt.Errorf("relay: serve HTTP: %w", herr)
	}
	cancel()
	<-listenDone
	return err
}

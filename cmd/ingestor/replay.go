package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/pcp/route-processing/pkg/config"
	"github.com/pcp/route-processing/pkg/dlqreplay"
	"github.com/pcp/route-processing/pkg/kafkax"
	"github.com/pcp/route-processing/pkg/obs"
)

// runDLQReplay is `ingestor dlq-replay`: it builds the DLQ reader and the
// producer from the ingestor's environment (DATABASE_URL is not needed),
// runs package dlqreplay, and prints its lines and summary on stdout. The
// flags, the output and the exit status are dlqreplay.Usage's (the
// `--help` text) and the package doc's (the runbook).
func runDLQReplay(ctx context.Context, args, environ []string, stdout, stderr io.Writer) error {
	opts, err := dlqreplay.ParseArgs(args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, dlqreplay.Usage)
		return nil
	}
	if err != nil {
		return &config.UsageError{Msg: "dlq-replay: " + err.Error() + " (see ingestor dlq-replay --help)"}
	}
	cc, err := config.LoadKafkaTool(environ)
	if err != nil {
		return err
	}
	logger := obs.NewLogger(stderr, cc.LogFormat, cc.LogLevel, cc.LogForceColor)

	rcfg := dlqreplay.Config{
		DLQTopic:     cc.TopicInputDLQ,
		Topic:        cmp.Or(opts.To, cc.TopicInput),
		OutputTopics: []string{cc.TopicProcessedRoute, cc.TopicRouteGeoreference},
		Filter:       opts.Filter,
		DryRun:       opts.DryRun,
	}
	if err := rcfg.Validate(); err != nil {
		return &config.UsageError{Msg: "dlq-replay: " + err.Error()}
	}

	client := kafkax.ClientConfig{
		BootstrapServers: cc.KafkaBootstrapServers,
		Properties:       cc.ConsumerProperties(),
		ClientID:         "pcp-route-processing-dlq-replay",
	}
	reader, err := kafkax.NewReader(logger, kafkax.ReaderConfig{
		ClientConfig: client,
		// Never joined nor committed to (see kafkax.Reader); named so that
		// ACLs can allow it.
		GroupID: "pcp-route-processing-dlq-replay",
	})
	if err != nil {
		return cc.NameVariables(err, true)
	}
	defer reader.Close()

	// A dry run creates no producer at all, so it cannot send anything.
	var producer dlqreplay.Producer
	if !opts.DryRun {
		client.Properties = cc.ProducerProperties()
		p, err := kafkax.NewProducer(logger, kafkax.ProducerConfig{ClientConfig: client})
		if err != nil {
			return cc.NameVariables(err, false)
		}
		defer p.Close(10 * time.Second)
		producer = p
	}

	rp, err := dlqreplay.New(logger, reader, producer, stdout, rcfg)
	if err != nil {
		return &config.UsageError{Msg: "dlq-replay: " + err.Error()}
	}
	logger.With("component", "dlq-replay").InfoContext(ctx, "starting", "from", rcfg.DLQTopic, "to", rcfg.Topic, "dry_run", rcfg.DryRun)
	res, err := rp.Run(ctx)
	switch {
	case err == nil:
		fmt.Fprintf(stdout, "dlq-replay: dry_run=%t %s\n", opts.DryRun, res)
	case res.Scanned > 0:
		// Not the success line: a script reading "failed=0" from it would
		// take an aborted replay for a complete one.
		fmt.Fprintf(stdout, "dlq-replay: INCOMPLETE, stopped by an error: dry_run=%t %s\n", opts.DryRun, res)
	}
	if errors.Is(err, dlqreplay.ErrNoSuchPartition) {
		// Known only once the DLQ's metadata is read, but a bad flag all
		// the same.
		return &config.UsageError{Msg: "dlq-replay: --partition: " + err.Error()}
	}
	return err
}

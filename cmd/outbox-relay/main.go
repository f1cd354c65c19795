// Command outbox-relay publishes the rows of route_passport_outbox to Kafka:
// it claims due rows with FOR UPDATE SKIP LOCKED and a lease, publishes them
// with an idempotent producer, and marks them PUBLISHED, or reschedules them
// with capped exponential backoff.
//
//	outbox-relay                          run the relay
//	outbox-relay stats [--json] [--exact] rows per status (PUBLISHED estimated unless --exact),
//	                                      oldest pending age, failures
//	outbox-relay requeue --failed | --id ID | --route-id ID
//	                                      rows a relay is publishing now are skipped (and
//	                                      counted); --id/--route-id matching no row exits 1
//	outbox-relay pause [--reason TEXT]    every relay stops claiming within one poll interval
//	outbox-relay resume
package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/pcp/route-processing/pkg/config"
	"github.com/pcp/route-processing/pkg/shutdown"
)

func main() {
	ctx, stop := shutdown.OnSignal()
	err := run(ctx, os.Args[1:], os.Environ(), os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "outbox-relay:", err)
	}
	os.Exit(config.ExitCode(err))
}

const usage = `usage: outbox-relay [stats [--json] [--exact] | requeue --failed|--id ID|--route-id ID | pause [--reason TEXT] | resume]

  (none)    run the relay
  stats     rows per status, oldest pending age, FAILED rows by last_error;
            PUBLISHED is an estimate from the table statistics unless --exact
  requeue   put rows back to PENDING, attempts 0, due now; rows a relay is
            publishing at this moment (PENDING under a live lease) are skipped
            and counted; --id or --route-id matching no row exits 1
  pause     every relay stops claiming within one poll interval
  resume    relays claim again
`

func run(ctx context.Context, args, environ []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return runRelay(ctx, environ, stderr)
	}
	switch args[0] {
	case "stats", "requeue", "pause", "resume":
		return runOps(ctx, args[0], args[1:], environ, stdout, stderr)
	}
	if config.IsHelp(args[0]) {
		fmt.Fprint(stdout, usage)
		return nil
	}
	return &config.UsageError{Msg: fmt.Sprintf("unknown subcommand %q (want none, stats, requeue, pause or resume)", args[0])}
}

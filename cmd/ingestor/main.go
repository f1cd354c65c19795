// Command ingestor consumes route passports from Kafka, validates them and
// writes each one (and, for a route not seen before, its two outbox rows)
// in one PostgreSQL transaction, committing the Kafka offset only
// afterwards. Invalid records go to the
// dead-letter topic.
//
//	ingestor                 consume, validate, write, commit
//	ingestor migrate         apply the database migrations and exit
//	ingestor dlq-replay ...  re-publish dead-lettered records to the input topic
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
		fmt.Fprintln(os.Stderr, "ingestor:", err)
	}
	os.Exit(config.ExitCode(err))
}

func run(ctx context.Context, args, environ []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return runIngest(ctx, environ, stderr)
	}
	switch args[0] {
	case "migrate":
		// An unexpected argument stops before the database is touched:
		// `migrate --help` must not apply migrations.
		if len(args) > 1 {
			if config.IsHelp(args[1]) {
				fmt.Fprintln(stdout, "usage: ingestor migrate (applies the database migrations of DATABASE_URL and exits)")
				return nil
			}
			return &config.UsageError{Msg: fmt.Sprintf("migrate takes no arguments, got %q", args[1])}
		}
		return runMigrate(ctx, environ, stderr)
	case "dlq-replay":
		return runDLQReplay(ctx, args[1:], environ, stdout, stderr)
	}
	if config.IsHelp(args[0]) {
		fmt.Fprintln(stdout, "usage: ingestor [migrate | dlq-replay [flags]]")
		return nil
	}
	return &config.UsageError{Msg: fmt.Sprintf("unknown subcommand %q (want none, migrate or dlq-replay)", args[0])}
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/user"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/pcp/route-processing/pkg/config"
	"github.com/pcp/route-processing/pkg/store"
)

// runOps runs the operator subcommands. They need only DATABASE_URL, so an
// operator can run them from any pod or a laptop with database access.
func runOps(ctx context.Context, cmd string, args, environ []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("outbox-relay "+cmd, flag.ContinueOnError)
	// A bad flag is one usage line (below); -h prints the flags to stdout.
	fs.SetOutput(io.Discard)
	// Each subcommand registers only its own flags, so a flag of another
	// one is a usage error and -h lists what applies.
	var f opFlags
	var failed bool
	var id, routeID string
	switch cmd {
	case "stats":
		fs.BoolVar(&f.asJSON, "json", false, "print JSON instead of a table")
		fs.BoolVar(&f.exact, "exact", false, "count PUBLISHED rows exactly (reads the whole table) instead of estimating")
	case "requeue":
		fs.BoolVar(&failed, "failed", false, "every FAILED row")
		fs.StringVar(&id, "id", "", "the row with this outbox id (exit 1 when there is none)")
		fs.StringVar(&routeID, "route-id", "", "the rows of this route (exit 1 when there are none)")
	case "pause":
		fs.StringVar(&f.reason, "reason", "", "why (shown by stats)")
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stdout)
			fmt.Fprintf(stdout, "usage: outbox-relay %s [flags]\n", cmd)
			fs.PrintDefaults()
			return nil
		}
		return &config.UsageError{Msg: fmt.Sprintf("%s: %v (see outbox-relay %s -h)", cmd, err, cmd)}
	}
	if fs.NArg() > 0 {
		return &config.UsageError{Msg: fmt.Sprintf("%s: unexpected argument %q", cmd, fs.Arg(0))}
	}
	if !utf8.ValidString(f.reason) {
		// PostgreSQL would refuse it with an encoding error (exit 1).
		return &config.UsageError{Msg: "pause: --reason is not valid UTF-8"}
	}

	if cmd == "requeue" {
		var err error
		if f.filter, err = requeueFilter(failed, id, routeID); err != nil {
			return err
		}
	}

	cfg, err := config.LoadMigrate(environ)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, opsTimeout)
	defer cancel()
	// Its own application_name, so that the sessions it waits for are its
	// own and not a running relay's (whileWaiting).
	pool, err := store.Open(ctx, cfg.DatabaseURL, "pcp-outbox-relay "+cmd)
	if err != nil {
		return err
	}
	defer store.ClosePool(pool, store.PoolCloseWait)
	ob := store.NewOutbox(pool)
	// whileWaiting's look at the lock waits needs a connection while the
	// write holds one: a pool of its own (DATABASE_URL may cap a pool at
	// one connection), connected only if the write waits that long.
	watchPool, err := store.Open(ctx, cfg.DatabaseURL, "pcp-outbox-relay "+cmd)
	if err != nil {
		return err
	}
	defer store.ClosePool(watchPool, store.PoolCloseWait)
	watch := store.NewOutbox(watchPool)

	err = runOp(ctx, cmd, f, ob, watch, stdout, stderr)
	switch {
	case !errors.Is(err, context.DeadlineExceeded):
	case ctx.Err() != nil:
		// Said plainly: the bare "context deadline exceeded" of a server
		// that never answered (a pooler waiting for a PostgreSQL that is
		// down) read like a fault of the command.
		err = fmt.Errorf("%w (no answer within the command's %s: a lock it waited for, named above if so, or PostgreSQL, or the pooler in front of it, not answering)", err, opsTimeout)
	default:
		// A connection's own bound ran out first: the host accepted the
		// connection and said nothing.
		err = fmt.Errorf("%w (no answer to the connection within its connect_timeout, %s unless DATABASE_URL sets one: PostgreSQL, or the pooler in front of it, not answering)", err, store.DefaultConnectTimeout)
	}
	return schemaHint(ctx, ob, err)
}

// opFlags are a subcommand's parsed flags.
type opFlags struct {
	exact, asJSON bool
	reason        string
	filter        store.RequeueFilter
}

// runOp runs subcommand cmd on ob (watch: the pool whileWaiting looks at
// lock waits through).
func runOp(ctx context.Context, cmd string, f opFlags, ob, watch *store.Outbox, stdout, stderr io.Writer) error {
	switch cmd {
	case "stats":
		s, err := ob.Stats(ctx, f.exact)
		if err != nil {
			return err
		}
		if f.asJSON {
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(s)
		}
		return printStats(stdout, s)
	case "requeue":
		var res store.RequeueResult
		err := whileWaiting(ctx, watch, stderr, func(ctx context.Context) (err error) {
			res, err = ob.Requeue(ctx, f.filter)
			return err
		})
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "requeued %d row(s)\n", res.Requeued)
		if res.InFlight > 0 {
			fmt.Fprintf(stdout, "skipped %d row(s) in flight: a relay is publishing them now (PENDING under a live lease); they end PUBLISHED or are rescheduled by it\n", res.InFlight)
		}
		return nil
	case "pause":
		if err := whileWaiting(ctx, watch, stderr, func(ctx context.Context) error {
			return ob.SetPaused(ctx, true, f.reason, operator())
		}); err != nil {
			return err
		}
		fmt.Fprintln(stdout, "paused: every relay stops claiming within one poll interval (batches in flight finish)")
		return nil
	case "resume":
		if err := whileWaiting(ctx, watch, stderr, func(ctx context.Context) error {
			return ob.SetPaused(ctx, false, "", operator())
		}); err != nil {
			return err
		}
		fmt.Fprintln(stdout, "resumed")
		return nil
	}
	return &config.UsageError{Msg: "unknown subcommand " + cmd}
}

// schemaHint adds what to do to an error of a database whose schema is
// missing or older than this build's; the bare "relation does not exist"
// did not say.
func schemaHint(ctx context.Context, ob *store.Outbox, err error) error {
	if !store.SchemaMissing(err) {
		return err
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	var schema *store.SchemaError
	if errors.As(ob.CheckSchema(cctx), &schema) {
		return fmt.Errorf("%w (%v)", err, schema)
	}
	return err
}

// opsTimeout bounds a subcommand, its waits for locks included.
const opsTimeout = time.Minute

// lockNoticeAfter is how long a subcommand's write runs before it looks for
// the sessions it waits for: a row lock is held for milliseconds by a relay,
// for as long as someone likes by a psql left in a transaction.
const lockNoticeAfter = 2 * time.Second

// whileWaiting runs write and, while it runs past lockNoticeAfter, tells
// stderr once about each session it waits for a lock of, so that a command
// behind a forgotten transaction says why it hangs instead of waiting out
// opsTimeout in silence.
func whileWaiting(ctx context.Context, watch *store.Outbox, stderr io.Writer, write func(context.Context) error) error {
	done := make(chan error, 1)
	go func() { done <- write(ctx) }()
	tick := time.NewTicker(lockNoticeAfter)
	defer tick.Stop()
	told := map[int]bool{}
	for {
		select {
		case err := <-done:
			return err
		case <-tick.C:
		}
		blockers, err := watch.Blockers(ctx)
		if err != nil {
			continue // the write's own error says more
		}
		for _, b := range blockers {
			if told[b.PID] {
				continue
			}
			told[b.PID] = true
			// Another role's state and transaction start read as NULL
			// without pg_read_all_stats.
			state := "state not visible to this role"
			if b.State != "" {
				state = fmt.Sprintf("%s, transaction open for %s", b.State, b.XactAge.Round(time.Second))
			}
			deadline, _ := ctx.Deadline()
			fmt.Fprintf(stderr, "waiting for a lock held by PostgreSQL session %d (application %q, %s); "+
				"this goes on when it commits or rolls back (`select pg_terminate_backend(%d)` ends it), or gives up in %s\n",
				b.PID, b.Application, state, b.PID, time.Until(deadline).Round(time.Second))
		}
	}
}

func requeueFilter(failed bool, id, routeID string) (store.RequeueFilter, error) {
	set := 0
	for _, b := range []bool{failed, id != "", routeID != ""} {
		if b {
			set++
		}
	}
	if set != 1 {
		return store.RequeueFilter{}, &config.UsageError{Msg: "requeue needs exactly one of --failed, --id ID, --route-id ID"}
	}
	parse := func(flagName, v string) (*uuid.UUID, error) {
		u, err := uuid.Parse(v)
		if err != nil || len(v) != 36 {
			return nil, &config.UsageError{Msg: fmt.Sprintf("requeue --%s: %q is not a UUID", flagName, v)}
		}
		return &u, nil
	}
	switch {
	case id != "":
		u, err := parse("id", id)
		return store.RequeueFilter{ID: u}, err
	case routeID != "":
		u, err := parse("route-id", routeID)
		return store.RequeueFilter{RouteID: u}, err
	}
	return store.RequeueFilter{Failed: true}, nil
}

// operator names who paused or resumed, for outbox_relay_control.updated_by.
func operator() string {
	name := "unknown"
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	if h, err := os.Hostname(); err == nil {
		name += "@" + h
	}
	return "outbox-relay cli (" + name + ")"
}

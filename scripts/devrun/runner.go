package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pcp/route-processing/pkg/testenv"
)

// runDir holds this run's logs; devBin the dev tools it builds.
const (
	runDir = ".dev/run"
	devBin = ".dev/bin"
)

// runner is one `make run`: what it started, in order, for stopAll.
type runner struct {
	con *console
	cfg config

	pg        *testenv.PostgresCluster
	broker    *testenv.BrokerProcess
	brokerOut *prefixer
	children  []*child
}

func (r *runner) run(ctx context.Context) error {
	for _, b := range []string{"bin/ingestor", "bin/outbox-relay"} {
		if _, err := os.Stat(b); err != nil {
			return fmt.Errorf("%s is missing: run 'make build' (make run does it first)", b)
		}
	}
	if err := os.MkdirAll(runDir, 0o755); err != nil {
		return err
	}
	r.con.say("building ./scripts/devwatch into %s", devBin)
	if err := testenv.GoBuild(ctx, devBin, "./scripts/devwatch"); err != nil {
		return err
	}
	devwatch := filepath.Join(devBin, "devwatch")

	dbURL, err := r.postgres(ctx)
	if err != nil {
		return err
	}
	bootstrap, err := r.kafka()
	if err != nil {
		return err
	}
	t := r.cfg.topics
	env := append(os.Environ(),
		"DATABASE_URL="+dbURL, "KAFKA_BOOTSTRAP_SERVERS="+bootstrap, "LOG_FORMAT=text",
		"TOPIC_INPUT="+t.input, "TOPIC_INPUT_DLQ="+t.dlq,
		"TOPIC_PROCESSED_ROUTE="+t.processedRoute, "TOPIC_ROUTE_GEOREFERENCE="+t.routeGeoref)
	if r.con.color {
		env = append(env, "FORCE_COLOR=1") // the binaries' text logs go through a pipe, but end on this terminal
	}

	r.con.say("migrating: bin/ingestor migrate")
	if err := r.runOnce(ctx, "migrate", "bin/ingestor", env, "migrate"); err != nil {
		return err
	}
	ingestorPort, err := freePortFrom(8081)
	if err != nil {
		return err
	}
	relayPort, err := freePortFrom(ingestorPort + 1)
	if err != nil {
		return err
	}
	ingestorHTTP, relayHTTP := "127.0.0.1:"+strconv.Itoa(ingestorPort), "127.0.0.1:"+strconv.Itoa(relayPort)
	r.con.say("starting bin/ingestor (http://%s) and bin/outbox-relay (http://%s)", ingestorHTTP, relayHTTP)
	ing, err := r.start("ingestor", "bin/ingestor", append(env, "HTTP_ADDR="+ingestorHTTP))
	if err != nil {
		return err
	}
	rel, err := r.start("relay", "bin/outbox-relay", append(env, "HTTP_ADDR="+relayHTTP))
	if err != nil {
		return err
	}
	if err := r.waitReady(ctx, map[*child]string{ing: ingestorHTTP, rel: relayHTTP}); err != nil {
		return err
	}

	watchArgs := []string{"watch", "-brokers", bootstrap, "-group-less", "-color", map[bool]string{true: "always", false: "never"}[r.con.color]}
	if r.cfg.bootstrap != "" { // on a cluster of one's own, show only what this run produces
		watchArgs = append(watchArgs, "-since-ms", strconv.FormatInt(time.Now().Add(-time.Second).UnixMilli(), 10))
	}
	if _, err := r.start("watch", devwatch, env, watchArgs...); err != nil {
		return err
	}
	samples, updates, err := sampleFiles()
	if err != nil {
		return err
	}
	r.con.say("sending %d sample passports (testdata/contract/, testdata/samples/) to %s", len(samples), t.input)
	if err := r.runOnce(ctx, "produce", devwatch, env, append([]string{"produce", "-brokers", bootstrap, "-topic", t.input}, samples...)...); err != nil {
		return err
	}
	for _, f := range updates {
		// Same key as the record it updates: same partition, so it is processed after it.
		key := strings.TrimPrefix(filepath.Base(f), "update-")
		if err := r.runOnce(ctx, "produce", devwatch, env, "produce", "-brokers", bootstrap, "-topic", t.input, "-key", key, f); err != nil {
			return err
		}
	}
	sentAt := time.Now()
	r.con.note("valid-*: 2 output events each ([watch] OUT); invalid-*: 1 DLQ record each ([watch] DLQ); update-*: the route row is updated, no new events")

	psql := r.psqlPath()
	r.tables(ctx, dbURL, psql, samples, len(updates))
	r.printInfo(ingestorHTTP, relayHTTP, dbURL, psql, devwatch, bootstrap)
	if r.cfg.runFor > 0 {
		r.con.say("stopping by itself %ds after the samples were sent (RUN_SECONDS); Ctrl-C stops it sooner", int(r.cfg.runFor.Seconds()))
	} else {
		r.con.say("Ctrl-C stops everything")
	}
	return r.wait(ctx, sentAt)
}

// postgres returns the database URL: the user's, or a fresh database on a
// throwaway cluster of this run.
func (r *runner) postgres(ctx context.Context) (string, error) {
	if r.cfg.databaseURL != "" {
		r.con.say("PostgreSQL: using DATABASE_URL (not reset; migrations are applied)")
		return r.cfg.databaseURL, nil
	}
	port, err := freePortFrom(55432)
	if err != nil {
		return "", err
	}
	r.con.say("PostgreSQL: starting a throwaway cluster on 127.0.0.1:%d", port)
	r.pg, err = testenv.StartPostgresCluster(testenv.PostgresOptions{Port: port})
	if err != nil {
		return "", fmt.Errorf("%w\n  or point DATABASE_URL at a PostgreSQL of your own", err)
	}
	conn, err := pgx.Connect(ctx, r.pg.URL("postgres"))
	if err != nil {
		return "", fmt.Errorf("connect to the dev cluster: %w", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+dbName); err != nil {
		return "", fmt.Errorf("create database %s: %w", dbName, err)
	}
	r.con.note("database %s created on a new cluster (the dev broker's offsets restart at 0 every run too)", dbName)
	return r.pg.URL(dbName), nil
}

// kafka returns the bootstrap servers: the user's, or a dev broker of this run.
func (r *runner) kafka() (string, error) {
	if r.cfg.bootstrap != "" {
		r.con.say("Kafka: using KAFKA_BOOTSTRAP_SERVERS=%s (its topics must exist)", r.cfg.bootstrap)
		return r.cfg.bootstrap, nil
	}
	port, err := freePortFrom(59092)
	if err != nil {
		return "", err
	}
	r.con.say("Kafka: starting scripts/devbroker on 127.0.0.1:%d (in memory, 3 partitions per topic)", port)
	logf, err := os.Create(filepath.Join(runDir, "broker.log"))
	if err != nil {
		return "", err
	}
	r.brokerOut = r.con.prefixer("broker", logf)
	r.broker, err = testenv.StartBrokerProcess(testenv.BrokerOptions{
		Addr: "127.0.0.1:" + strconv.Itoa(port), Partitions: 3, Topics: r.cfg.topics.list(), Output: r.brokerOut,
	})
	if err != nil {
		return "", fmt.Errorf("%w (log: .dev/run/broker.log)", err)
	}
	return r.broker.Addr(), nil
}

// waitReady waits until every child answers /readyz with 200.
func (r *runner) waitReady(ctx context.Context, addrs map[*child]string) error {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, r.cfg.readyTimeout)
	defer cancel()
	errs := make(chan error, len(addrs))
	for c, addr := range addrs {
		go func() {
			err := c.proc.WaitHTTP(ctx, "http://"+addr+"/readyz")
			if err != nil && c.proc.Exited() {
				err = fmt.Errorf("%s exited during start-up (status %d); last lines of .dev/run/%s.log:\n%s", c.name, c.proc.ExitCode(), c.name, tail(filepath.Join(runDir, c.name+".log"), 20))
			}
			errs <- err
		}()
	}
	var first error
	for range addrs {
		if err := <-errs; err != nil && first == nil {
			first = err
			cancel()
		}
	}
	if first != nil {
		if cause := context.Cause(ctx); cause != nil && cause != context.Canceled && cause != context.DeadlineExceeded {
			return cause // a signal
		}
		return fmt.Errorf("not ready after %s: %v (logs in .dev/run/; READY_TIMEOUT=%d)", time.Since(start).Round(time.Second), first, int(r.cfg.readyTimeout.Seconds()))
	}
	r.con.say("both ready after %.0fs", time.Since(start).Seconds())
	return nil
}

// sampleFiles are the records make run sends: every valid-* then every
// invalid-* of the contract's examples and the extra samples, and the
// update-* samples (sent after, keyed by the file they update).
func sampleFiles() (samples, updates []string, err error) {
	var valid, invalid []string
	for _, dir := range []string{"testdata/contract", "testdata/samples"} {
		entries, err := os.ReadDir(dir)
		if err != nil {
			return nil, nil, fmt.Errorf("samples: %w", err)
		}
		for _, e := range entries {
			name, path := e.Name(), filepath.Join(dir, e.Name())
			switch {
			case strings.HasPrefix(name, "valid-"):
				valid = append(valid, path)
			case strings.HasPrefix(name, "invalid-"):
				invalid = append(invalid, path)
			case strings.HasPrefix(name, "update-"):
				updates = append(updates, path)
			}
		}
	}
	slices.SortFunc(valid, byBase)
	slices.SortFunc(invalid, byBase)
	return append(valid, invalid...), updates, nil
}

func byBase(a, b string) int { return strings.Compare(filepath.Base(a), filepath.Base(b)) }

func (r *runner) psqlPath() string {
	if r.pg != nil {
		if p := filepath.Join(r.pg.BinDir(), "psql"); fileExists(p) {
			return p
		}
	}
	p, _ := exec.LookPath("psql")
	return p
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// tables waits until the samples are through (or 20 s), then prints the
// tables with psql.
func (r *runner) tables(ctx context.Context, dbURL, psql string, samples []string, updates int) {
	want := 0
	for _, f := range samples {
		if strings.HasPrefix(filepath.Base(f), "valid-") {
			want++
		}
	}
	var rows, updated, published int
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		rows, updated, published = counts(ctx, dbURL)
		if rows >= want && updated >= updates && published >= 2*want {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
	if psql == "" || ctx.Err() != nil {
		return
	}
	r.con.say("route_passports after the samples (outbox: %d published):", published)
	for _, q := range []string{
		"SELECT route_id, route_name_short AS short, left(route_name_full, 44) AS route_name_full, split_part(geometry_wkt, '(', 1) AS geometry, source_partition AS p, source_offset AS off, updated_at > created_at AS updated FROM route_passports ORDER BY created_at",
		"SELECT event_type, status, count(*) FROM route_passport_outbox GROUP BY 1, 2 ORDER BY 1, 2",
	} {
		_ = r.runOnce(ctx, "db", psql, os.Environ(), dbURL, "-X", "-q", "-P", "pager=off", "-c", q)
	}
}

func counts(ctx context.Context, dbURL string) (rows, updated, published int) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return 0, 0, 0
	}
	defer conn.Close(context.Background())
	_ = conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM route_passports),
		(SELECT count(*) FROM route_passports WHERE updated_at > created_at),
		(SELECT count(*) FROM route_passport_outbox WHERE status = 'PUBLISHED')`).Scan(&rows, &updated, &published)
	return rows, updated, published
}

func (r *runner) printInfo(ingestorHTTP, relayHTTP, dbURL, psql, devwatch, bootstrap string) {
	hint := `psql "$DATABASE_URL"`
	if r.pg != nil {
		if p, _ := exec.LookPath("psql"); p != "" {
			psql = "psql"
		}
		hint = fmt.Sprintf("%s '%s'", psql, dbURL)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n", r.con.paint(cBold, "Running."))
	fmt.Fprintf(&b, "  ingestor   http://%s/metrics   /healthz   /readyz\n", ingestorHTTP)
	fmt.Fprintf(&b, "  relay      http://%s/metrics   /healthz   /readyz\n", relayHTTP)
	fmt.Fprintf(&b, "  tables     %s -c 'TABLE route_passport_outbox'\n", hint)
	fmt.Fprintf(&b, "             (route_passports, route_passport_outbox)\n")
	fmt.Fprintf(&b, "  more input %s produce -brokers %s FILE...\n", devwatch, bootstrap)
	fmt.Fprintf(&b, "  logs       .dev/run/ingestor.log  relay.log  watch.log  broker.log  postgres.log (copied at stop)\n")
	r.con.write(b.String())
}

// wait runs until RUN_SECONDS after the samples, a signal, or a child that
// ends by itself.
func (r *runner) wait(ctx context.Context, sentAt time.Time) error {
	var until <-chan time.Time
	if r.cfg.runFor > 0 {
		until = time.After(time.Until(sentAt.Add(r.cfg.runFor)))
	}
	exited := make(chan *child, len(r.children)+1)
	for _, c := range r.children {
		go func() { <-c.proc.Done(); exited <- c }()
	}
	if r.broker != nil {
		go func() {
			<-r.broker.Process().Done()
			exited <- &child{name: "broker", proc: r.broker.Process()}
		}()
	}
	pgCheck := time.NewTicker(time.Second)
	defer pgCheck.Stop()
	for {
		select {
		case <-until:
			r.con.say("RUN_SECONDS=%d elapsed", int(r.cfg.runFor.Seconds()))
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		case c := <-exited:
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			return fmt.Errorf("%s exited unexpectedly (status %d); log: .dev/run/%s.log", c.name, c.proc.ExitCode(), c.name)
		case <-pgCheck.C:
			if r.pg != nil && !r.pg.Alive() {
				return fmt.Errorf("PostgreSQL stopped unexpectedly; log: .dev/run/postgres.log")
			}
		}
	}
}

func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

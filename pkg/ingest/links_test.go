package ingest_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pcp/route-processing/pkg/ingest"
	"github.com/pcp/route-processing/pkg/testenv"
)

// These tests are the ingestor's part of issue 11 on a real PostgreSQL and
// broker: a hung database call must not hang the ingestor nor its
// readiness, a timeout is never a dead letter (and an outage only when the
// database does not answer), and after an outage it writes again within a
// probe tick of the database's return.

// A write blocked by a lock the test holds: the ingestor is not ready within
// a few seconds (the probe finds the lock wait), dead-letters nothing, and
// writes everything once the lock is gone.
func TestLockedWriteIsAnOutageWithinSeconds(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, "")
	ctx := context.Background()
	admin := adminConn(t, b.dbURL)
	// The default backoff cap, so that the recovery cannot come from a
	// short backoff.
	r := b.start(t, func(c *ingest.Config) { c.MaxBackoff = 30 * time.Second })

	all, _ := b.warmUp(t, r, 10)

	tx, err := admin.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "lock table route_passports in access exclusive mode")
	require.NoError(t, err)
	recs, _ := validRecords(t, 10)
	locked := time.Now()
	all = append(all, testenv.Produce(t, b.bootstrap, b.topic, recs...)...)
	require.Eventually(t, func() bool { return r.readyz(t) != http.StatusOK }, 15*time.Second, 50*time.Millisecond,
		"a write hanging on a lock is reported")
	notReady := time.Since(locked)
	time.Sleep(4 * time.Second) // a few timeouts and retries
	require.NoError(t, tx.Rollback(ctx))
	released := time.Now()
	b.waitCommitted(t, endOffsets(all), 60*time.Second)
	written := time.Since(released)
	require.Eventually(t, func() bool { return r.readyz(t) == http.StatusOK }, 10*time.Second, 50*time.Millisecond)
	t.Logf("figures: locked write: not ready %.2fs after the records arrived (db timeout %s); written %.2fs after the lock was released; dlq 0",
		notReady.Seconds(), ingest.DBTimeoutFor(500), written.Seconds())
	require.Less(t, notReady, 8*time.Second, "not ready within a few seconds")
	require.NoError(t, r.stop(t))
	require.Equal(t, 20, b.count(t, "select count(*) from route_passports"))
	require.Empty(t, testenv.ReadAll(t, b.bootstrap, b.dlqTopic), "a timeout is an outage, never a rejection")
}

// A blackholed PostgreSQL link (bytes held, no RST) while passports stream
// in: with a database call bound far longer than the test, /readyz goes
// non-200 within a few seconds (a call outstanding 1s triggers a ping,
// which fails), nothing is dead-lettered, and everything is written after
// the link comes back.
func TestBlackholedDatabaseLinkIsNotReadyWithinSeconds(t *testing.T) {
	t.Parallel()
	direct := testenv.DatabaseURL(t)
	px := newBlackholeProxy(t, direct)
	b := setup(t, 1, px.url)
	r := b.start(t, func(c *ingest.Config) { c.DBTimeout = time.Minute; c.MaxBackoff = 30 * time.Second })

	var all []testenv.Record
	produce := func(n int) {
		recs, _ := validRecords(t, n)
		all = append(all, testenv.Produce(t, b.bootstrap, b.topic, recs...)...)
	}
	produce(10)
	b.waitCommitted(t, endOffsets(all), 60*time.Second)
	require.Eventually(t, func() bool { return r.readyz(t) == http.StatusOK }, 10*time.Second, 50*time.Millisecond)

	px.freeze()
	frozen := time.Now()
	var notReady time.Duration
	for time.Since(frozen) < 10*time.Second {
		produce(5)
		if r.readyz(t) != http.StatusOK && notReady == 0 {
			notReady = time.Since(frozen)
		}
		time.Sleep(200 * time.Millisecond)
	}
	require.NotZero(t, notReady, "/readyz answered 200 throughout a 10s blackhole")
	committedDuring := b.committed(t)
	px.thaw()
	thawed := time.Now()
	require.Eventually(t, func() bool { return r.readyz(t) == http.StatusOK }, 60*time.Second, 50*time.Millisecond)
	ready := time.Since(thawed)
	b.waitCommitted(t, endOffsets(all), 90*time.Second)
	t.Logf("figures: database blackhole 10s: not ready %.2fs after it began; ready %.2fs and all committed %.2fs after it ended; produced %d; dlq 0",
		notReady.Seconds(), ready.Seconds(), time.Since(thawed).Seconds(), len(all))
	require.Less(t, notReady, 5*time.Second, "not ready within a few seconds of the blackhole")
	for p, o := range committedDuring {
		require.LessOrEqual(t, o, endOffsets(all)[p])
	}

	// Again: the first one's misses, and any probe answered after it
	// having waited through it, must not lengthen the next probe's wait
	// (in the relay they made a second blackhole show 3 s later; here the
	// writes since and the idle probes' fast answers shorten it again).
	produce(5)
	b.waitCommitted(t, endOffsets(all), 60*time.Second)
	px.freeze()
	frozen = time.Now()
	var notReadyAgain time.Duration
	for time.Since(frozen) < 10*time.Second && notReadyAgain == 0 {
		produce(5)
		if r.readyz(t) != http.StatusOK {
			notReadyAgain = time.Since(frozen)
		}
		time.Sleep(200 * time.Millisecond)
	}
	px.thaw()
	require.NotZero(t, notReadyAgain, "/readyz answered 200 throughout the second blackhole")
	b.waitCommitted(t, endOffsets(all), 90*time.Second)
	t.Logf("figures: a second blackhole: not ready %.2fs after it began", notReadyAgain.Seconds())
	require.Less(t, notReadyAgain, 5*time.Second, "the second blackhole shows as soon as the first")
	require.NoError(t, r.stop(t))
	require.Empty(t, testenv.ReadAll(t, b.bootstrap, b.dlqTopic), "nothing dead-lettered")
	require.Equal(t, len(all), b.count(t, "select count(*) from route_passports"))
}

// blackholeProxy forwards TCP to PostgreSQL and can hold every byte in
// both directions without closing anything (a half-open link).
type blackholeProxy struct {
	url    string
	mu     sync.Mutex
	frozen bool
	cond   *sync.Cond
}

func newBlackholeProxy(t *testing.T, target string) *blackholeProxy {
	t.Helper()
	u, err := url.Parse(target)
	require.NoError(t, err)
	upstream := u.Host
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	u.Host = ln.Addr().String()
	p := &blackholeProxy{url: u.String()}
	p.cond = sync.NewCond(&p.mu)
	t.Cleanup(p.thaw)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.serve(c, upstream)
		}
	}()
	return p
}

func (p *blackholeProxy) serve(c net.Conn, upstream string) {
	defer c.Close()
	s, err := net.Dial("tcp", upstream)
	if err != nil {
		return
	}
	defer s.Close()
	done := make(chan struct{}, 2)
	go func() { p.pipe(s, c); done <- struct{}{} }()
	go func() { p.pipe(c, s); done <- struct{}{} }()
	<-done
}

// pipe copies src to dst, holding each chunk while the proxy is frozen.
func (p *blackholeProxy) pipe(dst io.Writer, src io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		p.mu.Lock()
		for p.frozen {
			p.cond.Wait()
		}
		p.mu.Unlock()
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *blackholeProxy) freeze() { p.set(true) }
func (p *blackholeProxy) thaw()   { p.set(false) }

func (p *blackholeProxy) set(frozen bool) {
	p.mu.Lock()
	p.frozen = frozen
	p.mu.Unlock()
	p.cond.Broadcast()
}

// A frozen DLQ broker (SIGSTOP: connections open, nothing answers) while
// invalid records arrive: not ready within a few seconds (a produce
// outstanding 1s triggers a metadata probe, which fails), nothing
// committed that was not dead-lettered, and dead-lettering resumes within
// a probe tick of the thaw although the retry backoff may be at 30s.
func TestFrozenDLQBrokerRecoversWithinSeconds(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, "")
	dlqBroker := testenv.NewBrokerProcess(t, testenv.BrokerOptions{Partitions: 1})
	b.dlqTopic = testenv.CreateTopic(t, dlqBroker.Addr(), "ingest-dlq", 1)
	b.dlqAt(t, dlqBroker.Addr(), 3*time.Second)
	r := b.start(t, func(c *ingest.Config) { c.MaxBackoff = 30 * time.Second })

	bad := func(n int) []testenv.Record {
		out := make([]testenv.Record, n)
		for i := range out {
			out[i] = testenv.Record{Key: []byte("bad"), Value: []byte("{")}
		}
		return out
	}
	all := testenv.Produce(t, b.bootstrap, b.topic, bad(3)...)
	b.waitCommitted(t, endOffsets(all), 60*time.Second)
	require.Eventually(t, func() bool { return r.readyz(t) == http.StatusOK }, 10*time.Second, 50*time.Millisecond)

	dlqBroker.Pause(t)
	frozen := time.Now()
	all = append(all, testenv.Produce(t, b.bootstrap, b.topic, bad(5)...)...)
	require.Eventually(t, func() bool { return r.readyz(t) != http.StatusOK }, 15*time.Second, 20*time.Millisecond,
		"a hung DLQ is reported")
	notReady := time.Since(frozen)
	// Several delivery timeouts, so that the retry backoff grows.
	for time.Since(frozen) < 12*time.Second {
		require.NotEqual(t, http.StatusOK, r.readyz(t), "ready while the DLQ is frozen")
		time.Sleep(200 * time.Millisecond)
	}
	committedDuring := b.committed(t)
	dlqBroker.Resume(t)
	thawed := time.Now()
	require.Eventually(t, func() bool { return r.readyz(t) == http.StatusOK }, 60*time.Second, 20*time.Millisecond)
	ready := time.Since(thawed)
	b.waitCommitted(t, endOffsets(all), 60*time.Second)
	t.Logf("figures: DLQ broker frozen 12s: not ready %.2fs after the freeze; ready %.2fs and all committed %.2fs after the thaw",
		notReady.Seconds(), ready.Seconds(), time.Since(thawed).Seconds())
	require.Less(t, notReady, 5*time.Second)
	require.LessOrEqual(t, ready, 2*time.Second, "dead-lettering within 2s of the thaw")
	require.NoError(t, r.stop(t))
	require.LessOrEqual(t, committedDuring[0], endOffsets(all[:3])[0], "nothing committed during the freeze that was not dead-lettered")
	require.GreaterOrEqual(t, len(testenv.ReadAll(t, dlqBroker.Addr(), b.dlqTopic)), 8, "every invalid record dead-lettered (at least once)")
}

// A database that answers but is slower than INGEST_DB_TIMEOUT for a whole
// batch (a trigger sleeps 40 ms per passport; INGEST_DB_TIMEOUT is 500 ms,
// so a write of statements and commit is bounded by 1 s, and 50 passports
// take 2 s) is slow, not down: /readyz stays 200 throughout,
// the batch is retried in halves until they fit, and nothing is
// dead-lettered. With every timeout taken as an outage, /readyz went
// non-200 at the first one.
func TestSlowWriteIsNotAnOutage(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, "")
	r := b.start(t, func(c *ingest.Config) { c.DBTimeout = 500 * time.Millisecond })
	polls, notReady := writeSlowly(t, b, r)
	t.Logf("figures: slow write: %d of %d readiness polls non-200 while 50 passports took longer than the 1s bound", notReady, polls)
	require.Zero(t, notReady, "a slow database is not an outage")
}

// The same with the bound the server's: statement_timeout set for the
// database (an operator's policy for the role or the server) at 300 ms,
// the ingestor's own bound far away. PostgreSQL cancels the statement
// (SQLSTATE 57014); that is a slow database too. Before, it counted as an
// outage: "postgres unavailable", consumption paused, /readyz non-200.
func TestStatementTimeoutIsNotAnOutage(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, "")
	alterDatabase(t, adminConn(t, b.dbURL), "set statement_timeout = '300ms'")
	r := b.start(t, func(c *ingest.Config) { c.DBTimeout = 30 * time.Second })
	polls, notReady := writeSlowly(t, b, r)
	t.Logf("figures: statement_timeout 300ms: %d of %d readiness polls non-200 while 50 passports took longer", notReady, polls)
	require.Zero(t, notReady, "a statement timeout while the database answers is not an outage")
	require.Zero(t, b.logs.count("postgres unavailable"), "nor logged as one")
	require.NotZero(t, b.logs.count("ran out of its time bound"), "the server's timeouts happened")
}

// writeSlowly makes every passport's insert take 40 ms (a trigger), writes
// 50 passports through r after one fast one, polls /readyz every 50 ms
// until they are in, and returns the polls and how many were not 200. It
// stops r and checks that nothing was dead-lettered: a timeout is never a
// rejection.
func writeSlowly(t *testing.T, b *testBundle, r *running) (polls, notReady int) {
	t.Helper()
	admin := adminConn(t, b.dbURL)
	all, _ := b.warmUp(t, r, 1)

	slowInserts(t, admin)

	recs, _ := validRecords(t, 50)
	all = append(all, testenv.Produce(t, b.bootstrap, b.topic, recs...)...)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for b.count(t, "select count(*) from route_passports") < 51 {
			polls++
			if r.readyz(t) != http.StatusOK {
				notReady++
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	b.waitCommitted(t, endOffsets(all), 60*time.Second)
	<-done
	require.Greater(t, polls, 20, "the writes were slow (a poll every 50 ms)")
	require.NoError(t, r.stop(t))
	require.Empty(t, testenv.ReadAll(t, b.bootstrap, b.dlqTopic), "a timeout is never a rejection")
	return polls, notReady
}

// slowInserts makes every insert into route_passports take 40 ms (a
// trigger).
func slowInserts(t *testing.T, admin *pgx.Conn) {
	t.Helper()
	_, err := admin.Exec(context.Background(), `
create function slow_passport() returns trigger language plpgsql as $$
begin perform pg_sleep(0.04); return new; end $$;
create trigger slow_passport before insert on route_passports
for each row execute function slow_passport()`)
	require.NoError(t, err)
}

// A row lock held by a transaction left idle (a forgotten psql session that
// updated a passport): the redelivered passport's write waits for it with
// no end in sight, so the ingestor is not ready within a few seconds,
// dead-letters nothing, and writes the record once the transaction ends.
func TestIdleTransactionRowLockIsAnOutage(t *testing.T) {
	t.Parallel()
	rowLockOutage(t, "")
}

// The same with a statement_timeout (300 ms) for the database: it cancels
// the waiting write before the stuck-write probe looks (after 1 s), so the
// probe never sees the lock wait; the write, cut again and again while the
// database answers pings, is slow at first and, down to one record, stuck.
// Taking every statement timeout for slowness kept /readyz 200 here.
func TestRowLockUnderStatementTimeoutIsAnOutage(t *testing.T) {
	t.Parallel()
	rowLockOutage(t, "300ms")
}

// rowLockOutage: a transaction left idle holds the row of a passport that
// is redelivered; the ingestor must report not ready within a few seconds,
// dead-letter nothing, and write the record once the transaction ends.
// statementTimeout, when not "", is set for the database first.
func rowLockOutage(t *testing.T, statementTimeout string) {
	b := setup(t, 1, "")
	ctx := context.Background()
	admin := adminConn(t, b.dbURL)
	if statementTimeout != "" {
		alterDatabase(t, admin, "set statement_timeout = '"+statementTimeout+"'")
	}
	// A bound far past the test, so that only the probe (or the server's
	// timeout) can report it.
	r := b.start(t, func(c *ingest.Config) { c.DBTimeout = time.Minute })

	all, ids := b.warmUp(t, r, 1)

	tx, err := admin.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "update route_passports set route_status = route_status where route_id = $1", ids[0])
	require.NoError(t, err)
	locked := time.Now()
	all = append(all, testenv.Produce(t, b.bootstrap, b.topic, testenv.Record{Key: all[0].Key, Value: all[0].Value})...)
	require.Eventually(t, func() bool { return r.readyz(t) != http.StatusOK }, 15*time.Second, 50*time.Millisecond,
		"a write waiting for an idle transaction's row lock is reported")
	notReady := time.Since(locked)
	require.NoError(t, tx.Rollback(ctx))
	b.waitCommitted(t, endOffsets(all), 60*time.Second)
	require.Eventually(t, func() bool { return r.readyz(t) == http.StatusOK }, 10*time.Second, 50*time.Millisecond)
	t.Logf("figures: idle transaction's row lock (statement_timeout %q): not ready %.2fs after the redelivery", statementTimeout, notReady.Seconds())
	require.Less(t, notReady, 8*time.Second, "not ready within a few seconds")
	require.NoError(t, r.stop(t))
	require.Empty(t, testenv.ReadAll(t, b.bootstrap, b.dlqTopic))
}

package relay

import (
	"cmp"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/pcp/route-processing/pkg/backoff"
	"github.com/pcp/route-processing/pkg/outbox"
	"github.com/pcp/route-processing/pkg/record"
)

// Config configures a Relay. Zero values take the defaults of contract §5
// and the README's configuration table;
// [Config.WithDefaults] is their one home, [Config.Validate] the one home of
// the rules between fields.
type Config struct {
	// MaxAttempts: a row that failed this many publishes becomes FAILED
	// (default 10). It is also written into each failed row's max_attempts.
	MaxAttempts int
	// InitialBackoff (default 1s) and MaxBackoff (default 60s) shape the
	// retry delay ([Backoff]).
	InitialBackoff time.Duration
	MaxBackoff     time.Duration
	// Jitter is the largest random fraction of a retry delay added to it,
	// or taken off it at MaxBackoff ([Backoff]; default 0.1; negative
	// means none).
	Jitter float64
	// LockTimeout is the lease of a claimed row (default 60s). It must
	// exceed PublishTimeout, and should by [LeaseMargin]: the publish may
	// take PublishTimeout plus the producer's report hand-off, and the marks
	// must land while the rows are still ours (a shorter lease risks
	// duplicates, never losses: marks check the lease token).
	LockTimeout time.Duration
	// BatchSize is the most rows per claim (default 500).
	BatchSize int
	// MaxClaimBytes bounds the payload bytes (as stored, pg_column_size)
	// of one claim, so that a run of large payloads cannot exhaust the
	// relay's memory: Workers × MaxClaimBytes (times the TOAST compression
	// ratio, times about two for the producer's copy) is held at most.
	// Default 16 MiB; a single larger row is still claimed, alone.
	MaxClaimBytes int64
	// PollInterval is the fallback poll when no notification arrives, and
	// the period of the pause-flag read that drives the paused gauge
	// (default 1s).
	PollInterval time.Duration
	// PublishTimeout bounds the wait for a batch's delivery reports; the
	// producer's delivery timeout should equal it. Default 30s, or, when
	// LockTimeout is too short for that, LockTimeout − LeaseMargin (at least
	// half the lease: short leases in tests and drills).
	PublishTimeout time.Duration
	// Retention: PUBLISHED rows older than this are deleted (default 24h;
	// negative disables the sweep). docs/capacity.md sizes it.
	Retention time.Duration
	// ProbeMaxBackoff caps the wait between broker probes in an outage, and
	// between claims and mark retries while PostgreSQL is unreachable
	// (default 500ms). A probe is one metadata request or one connection
	// attempt, cheap enough to repeat twice a second for as long as an outage
	// lasts; a long cap would only add to the time to recover after the
	// dependency is back (at most one cap, plus the probe).
	ProbeMaxBackoff time.Duration
	// DBTimeout bounds the pause-flag read, the gauges and the retention sweep
	// (default 3s), and is the least bound of the others: a claim may run as
	// long as the lease leaves room for (claimCall: 20s with the defaults;
	// DBTimeout while the database is down, doubling per timed-out claim),
	// marks, retries, postpones and releases until their lease ends
	// (writeCall). A healthy call takes milliseconds (a claim or mark of 500
	// rows ~10-50ms, a second or so under a checkpoint stall). Hung calls are
	// found by the probe that runs beside them after half of DBTimeout (at
	// most a second), so the relay reports "postgres" not ready within seconds
	// of a blackhole instead of waiting for the kernel to give up on the
	// connection.
	DBTimeout time.Duration
	// Workers is the number of claim/publish/mark loops (default 2): two
	// let one loop's mark overlap the other's publish.
	Workers int
	// StatsInterval is the refresh period of the pending and table gauges
	// (default 5s).
	StatsInterval time.Duration
	// RelistenInterval is how often the LISTEN connection is replaced while
	// notifications do not arrive (default relistenEvery, 30s; see
	// Relay.Relisten).
	RelistenInterval time.Duration
	// RetentionInterval is the period of the retention sweep (default 10s:
	// small, frequent sweeps instead of a minute's deletes at once); each
	// statement deletes at most RetentionBatch rows (default 5000), with
	// [retentionPause] between statements.
	RetentionInterval time.Duration
	RetentionBatch    int
	// ClaimFullScanInterval is the period of the claim watermark's full
	// rescan (watermark.go; default 10s): the most a row written below the
	// watermark (a transaction open longer than ClaimWatermarkMargin) waits
	// beyond its commit while rescans succeed; under a snapshot held so
	// long that they run out of their bound, until one does. Negative: no
	// watermark, every claim scans the PENDING index from its start.
	ClaimFullScanInterval time.Duration
	// ClaimWatermarkMargin is how far below the database's now() the
	// watermark always stays (default 10s): a transaction that writes a
	// PENDING row and commits within it is never missed by a bounded claim.
	ClaimWatermarkMargin time.Duration
	// ReindexInterval is the least time between two passes of the
	// reindexer (reindex.go) across all relays (default 1h; negative: no
	// reindexer). Each relay looks at the indexes' sizes every minute, so a
	// bloated index is rebuilt within a minute or two of vacuum having
	// freed its entries, unless a pass ran less than this long ago.
	ReindexInterval time.Duration
	// ReindexMinBytes: smaller indexes are never rebuilt (default 32 MiB):
	// their bloat costs little, and a rebuild reads the whole table.
	ReindexMinBytes int64
	// ShutdownGrace bounds how long an in-flight publish may go on after
	// Run's context ends (default 15s); what is not delivered by then has
	// its lease given back. With the mark (≤ 5 s) the default leaves the
	// rest of the contract's 30 s (package shutdown) to the producer's
	// close, the pool's and the trace flush, even while PostgreSQL hangs.
	ShutdownGrace time.Duration

	// Registerer receives the relay's metrics (nil: none registered).
	Registerer prometheus.Registerer
	// Readiness receives the "kafka" and "postgres" states (nil: ignored).
	Readiness Readiness
	// Tracer, when set, gets a span per claim and per published row, and
	// the published record's traceparent header becomes the publish span's
	// (nil: no spans, headers published as stored).
	Tracer trace.Tracer
}

// Defaults of the fields whose default another one depends on.
const (
	DefaultLockTimeout    = 60 * time.Second
	DefaultPublishTimeout = 30 * time.Second
	// DefaultMaxClaimBytes is the default of Config.MaxClaimBytes.
	DefaultMaxClaimBytes = 16 << 20
	// DefaultReindexMinBytes is the default of Config.ReindexMinBytes.
	DefaultReindexMinBytes = 32 << 20
	// DefaultDBTimeout is the default of Config.DBTimeout.
	DefaultDBTimeout = 3 * time.Second
)

// ProducerLinger is the linger.ms the relay's producer should use: 0. The
// relay hands the producer a whole claimed batch in one loop of Produce
// calls (microseconds apart), so the messages are queued together before a
// request can leave and a linger could only add its own length to every
// batch's latency; while one request is in flight the next fill up by
// themselves. Measured 2026-12-01 on the 2-core machine under load ~10
// (noisy), in-process broker, fsync on: TestRelayLatency (commit → record,
// median / p90) 2.5 / 6.3 ms at linger 0, 3.9–4.6 / 7.5–20 ms at 1 ms,
// 7.3–8.7 / 9–24 ms at 5 ms; BenchmarkRelay default (20,000 rows)
// 7,500–8,500 events/s at 0, 7,200–7,300 at 1 ms, 5,800–6,600 at 5 ms.
// (BENCH_RELAY_LINGER overrides it in the relay's tests to re-measure.)
const ProducerLinger = 0 * time.Millisecond

// Lease budget: a batch's publish may last PublishTimeout plus the
// producer's delivery-report margin (it waits message.timeout.ms + at most
// record.ReportMargin), and its marks need time to land before the lease
// ends.
const (
	reportMargin = record.ReportMargin
	markMargin   = 5 * time.Second
	// LeaseMargin is what a lease should leave beyond PublishTimeout.
	LeaseMargin = reportMargin + markMargin
)

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	c.MaxAttempts = cmp.Or(c.MaxAttempts, outbox.DefaultMaxAttempts)
	c.InitialBackoff = cmp.Or(c.InitialBackoff, time.Second)
	c.MaxBackoff = cmp.Or(c.MaxBackoff, 60*time.Second)
	if c.Jitter == 0 {
		c.Jitter = 0.1
	}
	c.Jitter = max(c.Jitter, 0)
	c.LockTimeout = cmp.Or(c.LockTimeout, DefaultLockTimeout)
	if c.PublishTimeout == 0 {
		c.PublishTimeout = DefaultPublishTimeout
		if c.LockTimeout < c.PublishTimeout+LeaseMargin {
			// The lease is what an operator chose; the publish timeout
			// follows it, keeping the margins (or half the lease for
			// short ones).
			c.PublishTimeout = max(c.LockTimeout-LeaseMargin, c.LockTimeout/2)
		}
	}
	c.BatchSize = cmp.Or(c.BatchSize, 500)
	c.MaxClaimBytes = cmp.Or(c.MaxClaimBytes, DefaultMaxClaimBytes)
	c.PollInterval = cmp.Or(c.PollInterval, time.Second)
	c.Retention = cmp.Or(c.Retention, 24*time.Hour)
	c.ProbeMaxBackoff = cmp.Or(c.ProbeMaxBackoff, 500*time.Millisecond)
	c.DBTimeout = cmp.Or(c.DBTimeout, DefaultDBTimeout)
	c.Workers = cmp.Or(c.Workers, 2)
	c.StatsInterval = cmp.Or(c.StatsInterval, 5*time.Second)
	c.RelistenInterval = cmp.Or(c.RelistenInterval, relistenEvery)
	c.RetentionInterval = cmp.Or(c.RetentionInterval, 10*time.Second)
	c.RetentionBatch = cmp.Or(c.RetentionBatch, 5000)
	c.ClaimFullScanInterval = cmp.Or(c.ClaimFullScanInterval, 10*time.Second)
	c.ClaimWatermarkMargin = cmp.Or(c.ClaimWatermarkMargin, 10*time.Second)
	c.ShutdownGrace = cmp.Or(c.ShutdownGrace, 15*time.Second)
	c.ReindexInterval = cmp.Or(c.ReindexInterval, time.Hour)
	c.ReindexMinBytes = cmp.Or(c.ReindexMinBytes, DefaultReindexMinBytes)
	return c
}

// MaxMaxAttempts is the largest OUTBOX_MAX_ATTEMPTS: the ingestor stores it
// in each new row, the relay enforces it.
const MaxMaxAttempts = 1_000_000

// Bounds of the lease and of the publish timeout. librdkafka takes the
// publish timeout in whole milliseconds as its message.timeout.ms, where 0
// means "never time out" and the largest value is 2^31−1 ms (24.8 days):
// a sub-millisecond timeout would silently become no timeout at all, and
// one past the range makes the producer refuse to start.
const (
	MinLockTimeout    = time.Second
	MinPublishTimeout = 100 * time.Millisecond
	MaxPublishTimeout = 24 * time.Hour
)

// FieldError names the Config field a rule rejected, so that a caller that
// filled Config from elsewhere (environment variables) can name its source.
type FieldError struct {
	Field  string
	Reason string
}

func (e *FieldError) Error() string { return fmt.Sprintf("relay: %s %s", e.Field, e.Reason) }

// Validate reports a configuration the relay cannot keep its promises with,
// as a *FieldError. It checks c with its defaults applied.
func (c Config) Validate() error {
	c = c.WithDefaults()
	fail := func(field, format string, args ...any) error {
		return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	switch {
	case c.MaxAttempts < 1 || c.MaxAttempts > MaxMaxAttempts:
		return fail("MaxAttempts", "is %d, outside [1, %d]", c.MaxAttempts, MaxMaxAttempts)
	case c.InitialBackoff < 0:
		return fail("InitialBackoff", "must be positive")
	case c.MaxBackoff < c.InitialBackoff:
		return fail("MaxBackoff", "(%s) is less than InitialBackoff (%s)", c.MaxBackoff, c.InitialBackoff)
	case c.LockTimeout < MinLockTimeout:
		return fail("LockTimeout", "(%s) is shorter than %s: a lease must outlast the publish of its batch", c.LockTimeout, MinLockTimeout)
	case c.PublishTimeout < MinPublishTimeout || c.PublishTimeout > MaxPublishTimeout:
		return fail("PublishTimeout", "(%s) is outside [%s, %s]", c.PublishTimeout, MinPublishTimeout, MaxPublishTimeout)
	case c.LockTimeout <= c.PublishTimeout:
		return fail("LockTimeout", "(%s) must exceed PublishTimeout (%s), and should by %s or more (delivery-report hand-off and marks)", c.LockTimeout, c.PublishTimeout, LeaseMargin)
	case c.BatchSize < 1 || c.BatchSize > 100_000:
		return fail("BatchSize", "is %d, outside [1, 100000]", c.BatchSize)
	case c.Workers < 1 || c.Workers > 64:
		return fail("Workers", "is %d, outside [1, 64]", c.Workers)
	case c.MaxClaimBytes < 1:
		return fail("MaxClaimBytes", "must be positive")
	case c.ReindexMinBytes < 1:
		return fail("ReindexMinBytes", "must be positive")
	case c.RetentionBatch < 1 || c.RetentionBatch > 100_000:
		return fail("RetentionBatch", "is %d, outside [1, 100000]", c.RetentionBatch)
	case c.Retention > 0 && c.Retention < c.LockTimeout:
		// A PUBLISHED mark sent again within its lease (after a failure
		// that may have committed) would find its row deleted, and the
		// relay would say another relay had taken it over.
		return fail("Retention", "(%s) is shorter than LockTimeout (%s): a published row must outlive its lease", c.Retention, c.LockTimeout)
	}
	// Periods and bounds that turn into busy loops (and a log line per
	// turn while the database is down) or calls that can never succeed
	// when set to a few nanoseconds.
	for _, d := range []struct {
		field string
		v     time.Duration
		min   time.Duration
	}{
		{"PollInterval", c.PollInterval, minPeriod}, {"StatsInterval", c.StatsInterval, minPeriod},
		{"RetentionInterval", c.RetentionInterval, minPeriod}, {"DBTimeout", c.DBTimeout, minPeriod},
		{"ProbeMaxBackoff", c.ProbeMaxBackoff, 10 * time.Millisecond},
		{"ClaimWatermarkMargin", c.ClaimWatermarkMargin, 0},
	} {
		if d.v < d.min || d.v < 0 {
			return fail(d.field, "(%s) is below %s", d.v, d.min)
		}
	}
	// The same for the periods that may be off (-1; 0 before the
	// defaults): OUTBOX_REINDEX_INTERVAL=1ms read the index sizes and the
	// table's health back to back.
	for _, d := range []struct {
		field string
		v     time.Duration
	}{{"ReindexInterval", c.ReindexInterval}, {"ClaimFullScanInterval", c.ClaimFullScanInterval}} {
		if d.v > 0 && d.v < minPeriod {
			return fail(d.field, "(%s) is below %s (0: off)", d.v, minPeriod)
		}
	}
	return nil
}

// dbRetryBackoff is the backoff between database retries (claims while
// PostgreSQL cannot be reached, and marks): from 100 ms, or ProbeMaxBackoff
// when that is lower (backoff.New would raise the cap to the start
// instead), up to ProbeMaxBackoff.
func (c Config) dbRetryBackoff() *backoff.Backoff {
	return backoff.New(min(100*time.Millisecond, c.ProbeMaxBackoff), c.ProbeMaxBackoff)
}

// minPeriod is the shortest polling period or database bound Validate
// accepts.
const minPeriod = 100 * time.Millisecond

// isolateDeadline is the last moment a one-by-one re-send of a batch
// leased at leased (its claim sent then) may begin: it may last
// PublishTimeout plus the report margin, and its mark needs markMargin,
// all within the lease.
func (c Config) isolateDeadline(leased time.Time) time.Time {
	return leased.Add(c.LockTimeout - c.PublishTimeout - LeaseMargin)
}

// probeTimeout bounds one broker probe while the cluster answers fast: a
// metadata round trip takes milliseconds on a live cluster, so 1.5s tells a
// dead one quickly (with stallAfter, a blackhole shows within 3s; issue 11
// asks for 5s). Over a slow link the bound grows (backoff.Patience, up to
// probeWaitMax), and a blackhole then shows within stallAfter + that.
func (c Config) probeTimeout() time.Duration {
	return min(c.PublishTimeout, 1500*time.Millisecond)
}

// probeWaitMax bounds a probe's wait on a slow link (backoff.Patience.Wait):
// half the publish timeout, at most 5 s and at least probeTimeout. It is
// also how late, at worst, an outage's prober notices a healed link whose
// probe in flight hangs, and a link slower than it is taken for a dead one
// (a new connection's setup has a bound of its own, 5 s by default:
// socket.connection.setup.timeout.ms in kafkax).
func (c Config) probeWaitMax() time.Duration {
	return max(c.probeTimeout(), min(c.PublishTimeout/2, 5*time.Second))
}

// stallAfter is how long a batch may wait for its delivery reports before
// the relay probes the cluster: a healthy batch is acknowledged in tens of
// milliseconds (a few hundred under load), so one that waits 1.5s may be
// talking to a blackhole, and the probe says whether a broker still
// answers (then it waits on). A false alarm costs a probe.
func (c Config) stallAfter() time.Duration {
	return min(c.PublishTimeout/2, 1500*time.Millisecond)
}

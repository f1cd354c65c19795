package relay

import (
	"cmp"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Config configures a Relay. Zero values take the defaults of contract §5;
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
	// Jitter is the largest random extra fraction of a retry delay
	// (default 0.1; negative means none).
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
	// between retries while PostgreSQL is unreachable (default 30s).
	ProbeMaxBackoff time.Duration
	// Workers is the number of claim/publish/mark loops (default 2): two
	// let one loop's mark overlap the other's publish.
	Workers int
	// StatsInterval is the refresh period of the pending and table gauges
	// (default 5s).
	StatsInterval time.Duration
	// RetentionInterval is the period of the retention sweep (default 10s:
	// small, frequent sweeps instead of a minute's deletes at once); each
	// statement deletes at most RetentionBatch rows (default 5000), with
	// [retentionPause] between statements.
	RetentionInterval time.Duration
	RetentionBatch    int
	// ClaimFullScanInterval is the period of the claim watermark's full
	// rescan (watermark.go; default 10s): the most a row written below the
	// watermark (a transaction open longer than ClaimWatermarkMargin) waits
	// beyond its commit. Negative: no watermark, every claim scans the
	// PENDING index from its start.
	ClaimFullScanInterval time.Duration
	// ClaimWatermarkMargin is how far below the database's now() the
	// watermark always stays (default 10s): a transaction that writes a
	// PENDING row and commits within it is never missed by a bounded claim.
	ClaimWatermarkMargin time.Duration
	// ShutdownGrace bounds how long an in-flight publish may go on after
	// Run's context ends (default 20s); what is not delivered by then has
	// its lease given back.
	ShutdownGrace time.Duration

	// Registerer receives the relay's metrics (nil: none registered).
	Registerer prometheus.Registerer
	// Readiness receives the "kafka" and "postgres" states (nil: ignored).
	Readiness Readiness
}

// Defaults of the fields whose default another one depends on.
const (
	DefaultLockTimeout    = 60 * time.Second
	DefaultPublishTimeout = 30 * time.Second
	// DefaultMaxClaimBytes is the default of Config.MaxClaimBytes.
	DefaultMaxClaimBytes = 16 << 20
)

// Lease budget: a batch's publish may last PublishTimeout plus the
// producer's delivery-report margin (kafkax waits message.timeout.ms + at
// most 5s), and its marks need time to land before the lease ends.
const (
	reportMargin = 5 * time.Second
	markMargin   = 5 * time.Second
	// LeaseMargin is what a lease should leave beyond PublishTimeout.
	LeaseMargin = reportMargin + markMargin
)

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	c.MaxAttempts = cmp.Or(c.MaxAttempts, 10)
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
	c.ProbeMaxBackoff = cmp.Or(c.ProbeMaxBackoff, 30*time.Second)
	c.Workers = cmp.Or(c.Workers, 2)
	c.StatsInterval = cmp.Or(c.StatsInterval, 5*time.Second)
	c.RetentionInterval = cmp.Or(c.RetentionInterval, 10*time.Second)
	c.RetentionBatch = cmp.Or(c.RetentionBatch, 5000)
	c.ClaimFullScanInterval = cmp.Or(c.ClaimFullScanInterval, 10*time.Second)
	c.ClaimWatermarkMargin = cmp.Or(c.ClaimWatermarkMargin, 10*time.Second)
	c.ShutdownGrace = cmp.Or(c.ShutdownGrace, 20*time.Second)
	return c
}

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
	case c.MaxAttempts < 1 || c.MaxAttempts > 1_000_000:
		return fail("MaxAttempts", "is %d, outside [1, 1000000]", c.MaxAttempts)
	case c.InitialBackoff < 0:
		return fail("InitialBackoff", "must be positive")
	case c.MaxBackoff < c.InitialBackoff:
		return fail("MaxBackoff", "(%s) is less than InitialBackoff (%s)", c.MaxBackoff, c.InitialBackoff)
	case c.LockTimeout <= c.PublishTimeout:
		return fail("LockTimeout", "(%s) must exceed PublishTimeout (%s), by %s or more", c.LockTimeout, c.PublishTimeout, LeaseMargin)
	case c.BatchSize < 1 || c.BatchSize > 100_000:
		return fail("BatchSize", "is %d, outside [1, 100000]", c.BatchSize)
	case c.Workers < 1 || c.Workers > 64:
		return fail("Workers", "is %d, outside [1, 64]", c.Workers)
	case c.MaxClaimBytes < 1:
		return fail("MaxClaimBytes", "must be positive")
	case c.RetentionBatch < 1 || c.RetentionBatch > 100_000:
		return fail("RetentionBatch", "is %d, outside [1, 100000]", c.RetentionBatch)
	}
	for _, d := range []struct {
		field string
		v     time.Duration
	}{
		{"LockTimeout", c.LockTimeout}, {"PublishTimeout", c.PublishTimeout}, {"PollInterval", c.PollInterval},
		{"ProbeMaxBackoff", c.ProbeMaxBackoff}, {"StatsInterval", c.StatsInterval}, {"RetentionInterval", c.RetentionInterval},
		{"ClaimWatermarkMargin", c.ClaimWatermarkMargin},
	} {
		if d.v < 0 {
			return fail(d.field, "(%s) must be positive", d.v)
		}
	}
	return nil
}

// isolateDeadline is the last moment a one-by-one re-send of a batch
// claimed at start may begin: it may last PublishTimeout plus the report
// margin, and its mark needs markMargin, all within the lease.
func (c Config) isolateDeadline(start time.Time) time.Time {
	return start.Add(c.LockTimeout - c.PublishTimeout - LeaseMargin)
}

// probeTimeout bounds one broker probe.
func (c Config) probeTimeout() time.Duration {
	return min(c.PublishTimeout, 5*time.Second)
}

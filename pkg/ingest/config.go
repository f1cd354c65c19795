package ingest

import (
	"cmp"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/pcp/route-processing/pkg/passport"
)

// Config configures an [Ingestor] ([New], [Ingestor.Run]). [DefaultConfig]
// holds every default; [New] fills the fields left zero whose zero value
// means nothing (sizes, timeouts), never RecordRetries, BatchMaxWait nor
// CommitInterval, whose zero is a setting.
type Config struct {
	// ConsumerGroup is written to kafka_dlt-original-consumer-group.
	ConsumerGroup string
	// DLQTopic receives the dead-letter records (TOPIC_INPUT_DLQ).
	DLQTopic string
	// Events is what the events of an accepted passport are frozen with.
	Events passport.EventConfig
	// BatchSize is the most records per transaction.
	BatchSize int
	// BatchBytes is the most record value bytes per transaction (a batch
	// always takes at least one record), so that large records cannot
	// build a statement near PostgreSQL's 1 GiB message limit.
	BatchBytes int
	// BatchMaxWait bounds how long a batch waits to fill. 0 (the default):
	// it does not wait; a free pipeline slot takes what has arrived (the
	// poll loop first drains what the client already fetched), and while
	// the slots are busy the next batch accumulates, so batches grow with
	// the load and an idle record costs one commit.
	BatchMaxWait time.Duration
	// Limits are the parser's size limits.
	Limits passport.Limits
	// RecordRetries: a record the database alone rejects is retried this
	// many times before it is dead-lettered as RETRYABLE.
	RecordRetries int
	// MinBackoff and MaxBackoff bound the wait between retries while the
	// database or the DLQ is unavailable (MaxBackoff below MinBackoff
	// lowers MinBackoff to it).
	MinBackoff, MaxBackoff time.Duration
	// Pipeline is how many batches may be in flight: 2 or 1 (strictly
	// sequential writes).
	Pipeline int
	// DBTimeout (INGEST_DB_TIMEOUT) bounds a write attempt's statements
	// and its commit, each; a call that carries both gets twice it (not the
	// wait for the predecessor batch). A call that times out is retried,
	// never a refusal of the records, and counts as the database being
	// unavailable only if a ping then fails. 0 (the default):
	// [DBTimeoutFor] the batch size.
	DBTimeout time.Duration
	// CommitTimeout bounds the wait for the synchronous offset commit on
	// revocation and on shutdown.
	CommitTimeout time.Duration
	// CommitInterval (INGEST_COMMIT_INTERVAL) is the least time between two
	// offset commits of the poll loop; commits on revocation and shutdown
	// go at once. 0: a commit after every finished batch. Each offset
	// commit is a round trip to the group coordinator, and at 1,000
	// passports/s the loop finishes hundreds of small batches a second:
	// a commit after each cost the ingestor and the broker CPU
	// (docs/performance.md, "Offset commits"). Offsets are still
	// committed only for records in the database or the DLQ; a crash
	// redelivers those past the last commit, written again idempotently.
	CommitInterval time.Duration
	// RevokeTimeout bounds the wait for in-flight batches of revoked
	// partitions; ShutdownTimeout the wait on shutdown, counted from the
	// stop (a revocation waiting then ends with it): with the commit
	// after it (CommitTimeout), the wait for the probes still inside a
	// Kafka client (up to probeWaitMax, while the brokers hang) and the
	// consumer's close (leaving the group) it leaves the rest of the
	// contract's 30 s (package shutdown, which cuts the later steps to what
	// is left) to the producer, the pool and the trace flush.
	RevokeTimeout, ShutdownTimeout time.Duration
	// PauseRecords and PauseBytes: the poll loop pauses every partition
	// while more than this many records or bytes wait for a batch slot
	// (0: max(20*BatchSize, 2000) records, 64 MiB). Pausing drops
	// librdkafka's prefetched data and resuming refetches it, so the window
	// is wide and resumption waits until both are down to half of it (for
	// records at least BatchSize), while plenty is left.
	PauseRecords, PauseBytes int

	// Tracer, when set, traces batches, records, writes and dead letters
	// (nil: no spans, and the events carry the input's traceparent).
	Tracer trace.Tracer

	// BeforeCommit, when set, is called before each offset commit; an
	// error skips that commit and every later one and ends Run with it.
	// Tests use it to simulate a crash between the database commit and the
	// offset commit.
	BeforeCommit func(offsets map[int32]int64) error
}

// DefaultConfig returns the defaults (README's configuration table and the
// chart's values.yaml state the ones an environment variable sets).
func DefaultConfig() Config {
	return Config{
		BatchSize:       500,
		BatchBytes:      16 << 20,
		BatchMaxWait:    0,
		Limits:          passport.DefaultLimits(),
		RecordRetries:   3,
		MinBackoff:      100 * time.Millisecond,
		MaxBackoff:      30 * time.Second,
		Pipeline:        2,
		DBTimeout:       0, // DBTimeoutFor(BatchSize)
		CommitTimeout:   5 * time.Second,
		CommitInterval:  100 * time.Millisecond,
		RevokeTimeout:   10 * time.Second,
		ShutdownTimeout: 12 * time.Second,
		PauseRecords:    0, // max(20*BatchSize, 2000)
		PauseBytes:      64 << 20,
	}
}

// withDefaults fills the zero fields that have no meaning of their own, and
// derives the dependent ones.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	c.BatchSize = cmp.Or(c.BatchSize, d.BatchSize)
	c.BatchBytes = cmp.Or(c.BatchBytes, d.BatchBytes)
	c.Limits.MaxValueBytes = cmp.Or(c.Limits.MaxValueBytes, d.Limits.MaxValueBytes)
	c.Limits.MaxPositions = cmp.Or(c.Limits.MaxPositions, d.Limits.MaxPositions)
	c.DBTimeout = cmp.Or(c.DBTimeout, DBTimeoutFor(c.BatchSize))
	c.CommitTimeout = cmp.Or(c.CommitTimeout, d.CommitTimeout)
	c.MinBackoff = cmp.Or(c.MinBackoff, d.MinBackoff)
	c.MaxBackoff = cmp.Or(c.MaxBackoff, d.MaxBackoff)
	if c.MaxBackoff < c.MinBackoff {
		c.MinBackoff = c.MaxBackoff
	}
	c.Pipeline = cmp.Or(c.Pipeline, d.Pipeline)
	c.RevokeTimeout = cmp.Or(c.RevokeTimeout, d.RevokeTimeout)
	c.ShutdownTimeout = cmp.Or(c.ShutdownTimeout, d.ShutdownTimeout)
	c.PauseRecords = cmp.Or(c.PauseRecords, max(20*c.BatchSize, 2000))
	c.PauseBytes = cmp.Or(c.PauseBytes, d.PauseBytes)
	return c
}

// DBTimeoutFor is the default bound of one database call for batches of
// batchSize records: 2 s, plus 2 ms per record (3 s at the default 500).
// A batch of 500 takes ~75–100 ms at the DB-only ceiling of a 2-core
// machine (5,000–6,800 passports/s in bench-report.md and its reruns), so
// 2 ms a row is ~10–14 times that, room for a loaded machine; the 2 s
// cover a commit's fsync behind a checkpoint. Larger bounds only delay noticing a hung link (a timeout
// costs nothing but a retry), smaller ones would fail healthy batches.
func DBTimeoutFor(batchSize int) time.Duration {
	return 2*time.Second + time.Duration(batchSize)*2*time.Millisecond
}

// FieldError names the Config field a value is wrong for, so that package
// config can name the environment variable behind it.
type FieldError struct {
	// Field is the Go name, "Limits.MaxPositions" for a nested one.
	Field  string
	Reason string
}

func (e *FieldError) Error() string { return "ingest: " + e.Field + ": " + e.Reason }

// minPeriod is the shortest database bound (DBTimeout) or retry backoff
// cap (MaxBackoff) Validate accepts.
const minPeriod = 100 * time.Millisecond

// maxCommitInterval bounds CommitInterval: records past the last commit are
// consumed again after a crash or a lost partition, and a group's lag as
// the brokers see it trails by up to the interval.
const maxCommitInterval = time.Minute

// Validate reports the first value Run cannot work with. New validates
// after filling the defaults; package config validates what the
// environment gave, so that an explicit 0 where 0 means nothing is
// refused rather than replaced.
func (c Config) Validate() error {
	intIn := func(field string, v, lo, hi int) error {
		if v < lo || v > hi {
			return &FieldError{Field: field, Reason: fmt.Sprintf("%d is outside [%d, %d]", v, lo, hi)}
		}
		return nil
	}
	positive := func(field string, d time.Duration) error {
		if d <= 0 {
			return &FieldError{Field: field, Reason: fmt.Sprintf("%s must be positive", d)}
		}
		return nil
	}
	for _, err := range []error{
		intIn("BatchSize", c.BatchSize, 1, 100_000),
		intIn("BatchBytes", c.BatchBytes, 1, 1<<30),
		intIn("Limits.MaxValueBytes", c.Limits.MaxValueBytes, 1, 1<<30),
		intIn("Limits.MaxPositions", c.Limits.MaxPositions, 4, 100_000_000),
		intIn("RecordRetries", c.RecordRetries, 0, 100),
		// The overlap check of a batch looks at its predecessor only,
		// which is enough while at most two batches are in flight.
		intIn("Pipeline", c.Pipeline, 1, 2),
		positive("MaxBackoff", c.MaxBackoff),
		positive("MinBackoff", c.MinBackoff),
	} {
		if err != nil {
			return err
		}
	}
	// A bound of a few milliseconds is a write that can never finish, and a
	// backoff capped at a few nanoseconds a busy loop with a log line per
	// turn while the database is down: both stall ingest with nothing
	// refused.
	if c.DBTimeout < 0 || (c.DBTimeout > 0 && c.DBTimeout < minPeriod) {
		return &FieldError{Field: "DBTimeout", Reason: fmt.Sprintf("%s is below %s (0: derived from the batch size)", c.DBTimeout, minPeriod)}
	}
	if c.MaxBackoff < minPeriod {
		return &FieldError{Field: "MaxBackoff", Reason: fmt.Sprintf("%s is below %s", c.MaxBackoff, minPeriod)}
	}
	if c.BatchMaxWait < 0 {
		return &FieldError{Field: "BatchMaxWait", Reason: fmt.Sprintf("%s must not be negative", c.BatchMaxWait)}
	}
	if c.CommitInterval < 0 || c.CommitInterval > maxCommitInterval {
		return &FieldError{Field: "CommitInterval", Reason: fmt.Sprintf("%s is outside [0s, %s]", c.CommitInterval, maxCommitInterval)}
	}
	if c.PauseRecords < 0 {
		return &FieldError{Field: "PauseRecords", Reason: "must not be negative"}
	}
	if c.PauseBytes < 0 {
		return &FieldError{Field: "PauseBytes", Reason: "must not be negative"}
	}
	return nil
}

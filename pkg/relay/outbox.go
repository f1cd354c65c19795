package relay

import (
	"context"
	"time"

	"github.com/pcp/route-processing/pkg/outbox"
	"github.com/pcp/route-processing/pkg/record"
)

// Outbox is the relay's view of route_passport_outbox; *store.Outbox
// implements it. Every method that takes leases changes only rows still
// held with that token and status PENDING; sent again after an error, each
// also finds the rows it already changed under that token and reports them
// again (settle's retries rely on it).
type Outbox interface {
	// Claim leases up to limit due PENDING rows, oldest first, for lease,
	// skipping rows leased or locked by others, and stopping before the
	// payloads' stored sizes exceed maxBytes (the first row is always
	// taken). more reports that due rows were left out for the byte bound.
	// It returns nothing while the relays are paused. When it fails after
	// rows may have been leased, it gives those leases back itself.
	Claim(ctx context.Context, limit int, maxBytes int64, lease time.Duration) (rows []outbox.Row, more bool, err error)
	// MarkPublished marks rows PUBLISHED, one statement per claim among
	// the leases; it returns how many rows changed.
	MarkPublished(ctx context.Context, leases []outbox.Lease) (int64, error)
	// Retry counts an attempt for each row: PENDING again after its delay,
	// or FAILED at maxAttempts. The lease is released.
	Retry(ctx context.Context, retries []outbox.Retry, maxAttempts int) ([]outbox.RetryResult, error)
	// Release gives leases back without counting an attempt.
	Release(ctx context.Context, leases []outbox.Lease) (int64, error)
	// Postpone gives leases back without counting an attempt, recording the
	// error in last_error and making each row due after its delay.
	Postpone(ctx context.Context, retries []outbox.Retry) (int64, error)
	// Control reads whether, why and by whom the relays are paused.
	Control(ctx context.Context) (outbox.Control, error)
	// Stuck fails when the relay's sessions wait for a lock that nobody is
	// working to release (a table lock, a row lock of an idle
	// transaction).
	Stuck(ctx context.Context) error
	// Pending counts PENDING rows and the age of the oldest, and FAILED
	// rows.
	Pending(ctx context.Context) (outbox.PendingSummary, error)
	// TableHealth reads what holds vacuum back and the table's size.
	TableHealth(ctx context.Context) (outbox.TableHealth, error)
	// DeletePublished deletes up to limit rows PUBLISHED between from (the
	// zero time: the oldest) and now−olderThan, oldest first; last is the
	// latest published_at it deleted (from when none).
	DeletePublished(ctx context.Context, olderThan time.Duration, limit int, from time.Time) (n int64, last time.Time, err error)
}

// Publisher sends records to Kafka; *kafkax.Producer implements it.
type Publisher interface {
	// ProduceBatch sends every record, then waits for every delivery
	// report. The i-th error is nil once recs[i] is acknowledged. An error
	// that is not the record's fault wraps [record.ErrUnavailable] (the
	// cluster could not take it: never counts an attempt) or
	// [record.ErrNotAttempted] (never judged, e.g. ctx ended first: the
	// lease is given back; the record may still be delivered, at least
	// once).
	ProduceBatch(ctx context.Context, recs []record.Record) []error
	// Probe returns nil when a broker answers within timeout and ctx's
	// deadline, whichever is sooner (topic "" asks for the broker list
	// only). A request begun may run out its wait after ctx is cancelled.
	Probe(ctx context.Context, topic string, timeout time.Duration) error
}

// Readiness receives the relay's component states ("kafka", "postgres"):
// reason "" means ready. *obs.Readiness implements it.
type Readiness interface {
	Set(component, reason string)
}

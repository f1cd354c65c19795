package relay

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pcp/route-processing/pkg/relay/relaytest"
	"github.com/pcp/route-processing/pkg/store"
	"github.com/pcp/route-processing/pkg/testenv"
)

// TestSweepRate measures the retention sweep's delete rate with the default
// RetentionBatch and pause on real PostgreSQL: it must exceed the peak
// publish rate (make bench: ~20,000 events/s), or a table fed at that rate
// outgrows its sweep. The rows are relaytest's (payloads of ~400 bytes,
// smaller than production's ~1.9 KB), the machine is shared: the figure is
// indicative; the assertion is that everything past retention goes.
func TestSweepRate(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	pool := testenv.Pool(t)
	const passports = 50_000
	relaytest.Seed(t, pool, passports, "a", "b")
	_, err := pool.Exec(ctx, `update route_passport_outbox set status = 'PUBLISHED', published_at = now() - interval '2 hours'`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `vacuum analyze route_passport_outbox`)
	require.NoError(t, err)

	r, err := New(slog.New(slog.NewTextHandler(io.Discard, nil)), store.NewOutbox(pool), &fakePublisher{}, Config{Retention: time.Hour})
	require.NoError(t, err)
	start := time.Now()
	n, _ := r.sweep(ctx, time.Time{})
	d := time.Since(start)
	require.Equal(t, int64(2*passports), n)
	t.Logf("retention sweep: %d rows in %s, %.0f rows/s (batch %d, pause %s; shared machine, noisy)",
		n, d.Round(time.Millisecond), float64(n)/d.Seconds(), r.cfg.RetentionBatch, retentionPause)
}

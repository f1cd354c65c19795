// Package relayio connects a relay.Relay to the real world: the outbox
// queries of pkg/store and the idempotent producer of pkg/kafkax. It only
// translates types and errors; the decisions are the relay's.
package relayio

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/pcp/route-processing/pkg/kafkax"
	"github.com/pcp/route-processing/pkg/relay"
	"github.com/pcp/route-processing/pkg/store"
)

// Outbox adapts *store.Outbox to relay.Outbox.
type Outbox struct{ *store.Outbox }

var _ relay.Outbox = Outbox{}

// Claim implements relay.Outbox.
func (o Outbox) Claim(ctx context.Context, limit int, maxBytes int64, lease time.Duration) ([]relay.Row, bool, error) {
	c, err := o.Outbox.Claim(ctx, store.ClaimLimits{Rows: limit, Bytes: maxBytes}, lease)
	if err != nil {
		return nil, false, err
	}
	out := make([]relay.Row, len(c.Rows))
	for i, r := range c.Rows {
		out[i] = relay.Row(r)
	}
	return out, c.More, nil
}

func leases(ls []relay.Lease) []store.Lease {
	out := make([]store.Lease, len(ls))
	for i, l := range ls {
		out[i] = store.Lease(l)
	}
	return out
}

// MarkPublished implements relay.Outbox.
func (o Outbox) MarkPublished(ctx context.Context, ls []relay.Lease) (int64, error) {
	return o.Outbox.MarkPublished(ctx, leases(ls))
}

// Release implements relay.Outbox.
func (o Outbox) Release(ctx context.Context, ls []relay.Lease) (int64, error) {
	return o.Outbox.Release(ctx, leases(ls))
}

// Postpone implements relay.Outbox.
func (o Outbox) Postpone(ctx context.Context, rs []relay.Retry) (int64, error) {
	in := make([]store.Retry, len(rs))
	for i, r := range rs {
		in[i] = store.Retry(r)
	}
	return o.Outbox.Postpone(ctx, in)
}

// Retry implements relay.Outbox.
func (o Outbox) Retry(ctx context.Context, rs []relay.Retry, maxAttempts int) ([]relay.RetryResult, error) {
	in := make([]store.Retry, len(rs))
	for i, r := range rs {
		in[i] = store.Retry(r)
	}
	res, err := o.Outbox.Retry(ctx, in, maxAttempts)
	if err != nil {
		return nil, err
	}
	out := make([]relay.RetryResult, len(res))
	for i, r := range res {
		out[i] = relay.RetryResult(r)
	}
	return out, nil
}

// Paused implements relay.Outbox.
func (o Outbox) Paused(ctx context.Context) (bool, error) {
	c, err := o.Outbox.Control(ctx)
	return c.Paused, err
}

// Pending implements relay.Outbox.
func (o Outbox) Pending(ctx context.Context) (relay.PendingSummary, error) {
	s, err := o.Outbox.Pending(ctx)
	return relay.PendingSummary(s), err
}

// Publisher adapts *kafkax.Producer to relay.Publisher, translating its
// errors into the relay's sentinels.
type Publisher struct{ *kafkax.Producer }

var _ relay.Publisher = Publisher{}

// PublishBatch implements relay.Publisher.
func (p Publisher) PublishBatch(ctx context.Context, msgs []relay.Message) []error {
	km := make([]kafkax.Message, len(msgs))
	for i, m := range msgs {
		km[i] = kafkax.Message{Topic: m.Topic, Key: m.Key, Value: m.Value}
		if len(m.Headers) > 0 {
			km[i].Headers = make([]kafkax.Header, len(m.Headers))
			for j, h := range m.Headers {
				km[i].Headers[j] = kafkax.Header(h)
			}
		}
	}
	errs := p.Producer.ProduceBatch(ctx, km)
	for i, err := range errs {
		errs[i] = classify(ctx, err)
	}
	return errs
}

// classify wraps err with the relay sentinel that says whose fault it is:
// ErrNotAttempted (the message was never judged: producer reset or closed,
// purged, shutting down), ErrUnavailable (the cluster's fault: never counts
// an attempt), or nothing (the message's fault: counts an attempt).
func classify(ctx context.Context, err error) error {
	switch {
	case err == nil:
		return nil
	case kafkax.IsNotAttempted(err):
		// The producer was reset after a fatal error, closed, or purged
		// its queues: the message itself was never refused.
		return fmt.Errorf("%w: %w", relay.ErrNotAttempted, err)
	case ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)):
		return fmt.Errorf("%w: %w", relay.ErrNotAttempted, err)
	case kafkax.IsUnavailable(err):
		return fmt.Errorf("%w: %w", relay.ErrUnavailable, err)
	}
	return err
}

// Probe implements relay.Publisher: a metadata request for the broker list.
func (p Publisher) Probe(ctx context.Context, timeout time.Duration) error {
	return p.Producer.Probe(ctx, "", timeout)
}

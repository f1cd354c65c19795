package store

import (
	"context"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/pcp/route-processing/pkg/backoff"
)

// A claim whose answer never came back may still have run on the server:
// the answer came after the client's timeout, or a link that held the bytes
// delivered the statement once it healed. Its rows are then leased under a
// token nobody holds. The give-back sent at once ([Outbox.releaseToken])
// usually fails for the same reason, or works but runs before the claim
// does, and those rows would wait a whole lease (OUTBOX_LOCK_TIMEOUT, 60 s
// by default) before any relay may claim them. orphanedClaims remembers
// such tokens and gives their leases back again, before later claims, on a
// doubling schedule (250 ms, 500 ms, 1 s…) that ends one lease after the
// failure.
//
// Each give-back reads the PENDING index from the failed claim's lower
// bound, which is costly on a database that is slow because a held
// snapshot keeps vacuum from pruning that index. So the schedule doubles
// whether or not a give-back succeeds (about eight per failed claim, not
// one per claim), one give-back runs at a time, and few tokens are kept.
type orphanedClaims struct {
	mu       sync.Mutex
	claims   map[uuid.UUID]*orphan
	inFlight bool // a give-back of remembered tokens is running
}

type orphan struct {
	from  time.Time     // the failed claim's lower bound on next_attempt_at
	next  time.Time     // when to give it back again
	wait  time.Duration // the wait after the next give-back
	until time.Time     // forget it after this
}

const (
	// orphanFirstWait is the wait after the first retried give-back; it
	// doubles after each.
	orphanFirstWait = 250 * time.Millisecond
	// maxOrphanedClaims bounds the tokens kept: a database that times out
	// every claim would otherwise add one per claim. The tokens beyond it
	// only expire with their lease, as they would without this.
	maxOrphanedClaims = 64
)

// add remembers the token of a claim from from that failed; it is due at
// once, or orphanFirstWait later when givenBack (the give-back sent at once
// worked).
func (c *orphanedClaims) add(token uuid.UUID, from time.Time, lease time.Duration, now time.Time, givenBack bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.claims == nil {
		c.claims = map[uuid.UUID]*orphan{}
	}
	if len(c.claims) >= maxOrphanedClaims {
		return
	}
	o := &orphan{from: from, next: now, wait: orphanFirstWait, until: now.Add(lease)}
	if givenBack {
		o.next, o.wait = now.Add(orphanFirstWait), 2*orphanFirstWait
	}
	c.claims[token] = o
}

// take returns the tokens due at now and the lowest lower bound among
// them, moves each one's next give-back on (doubling its wait), forgets
// those whose lease has passed, and marks a give-back in flight. It returns
// nothing while another give-back is in flight; the caller of a non-empty
// take must call done.
func (c *orphanedClaims) take(now time.Time) (tokens []uuid.UUID, from time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inFlight {
		return nil, time.Time{}
	}
	for token, o := range c.claims {
		if o.next.After(now) {
			continue
		}
		if len(tokens) == 0 || o.from.Before(from) {
			from = o.from
		}
		tokens = append(tokens, token)
		o.next = now.Add(o.wait)
		o.wait *= 2
		if !o.next.Before(o.until) {
			delete(c.claims, token)
		}
	}
	c.inFlight = len(tokens) > 0
	return tokens, from
}

// all returns every remembered token and the lowest lower bound among
// them, whatever their schedule.
func (c *orphanedClaims) all() (tokens []uuid.UUID, from time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for token, o := range c.claims {
		if len(tokens) == 0 || o.from.Before(from) {
			from = o.from
		}
		tokens = append(tokens, token)
	}
	return tokens, from
}

// done ends the give-back that take started.
func (c *orphanedClaims) done() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.inFlight = false
}

// releaseOrphans gives back the leases of the remembered claims that are
// due, for at most releaseTokenTimeout. A give-back that fails is simply
// tried again at its next time.
func (o *Outbox) releaseOrphans(ctx context.Context) {
	tokens, from := o.orphans.take(time.Now())
	if len(tokens) == 0 {
		return
	}
	defer o.orphans.done()
	_ = o.giveBack(ctx, from, tokens)
}

// orphanSettle are the waits, on a stop, before each give-back of the
// remembered claims (ReleaseOrphans): a claim the stop cut usually ends on
// the server within a few milliseconds of its give-back, after it or
// before.
var orphanSettle = [...]time.Duration{0, 250 * time.Millisecond, 750 * time.Millisecond}

// ReleaseOrphans gives back, once the relay's claims have stopped, the
// leases of every remembered claim: no later claim will. A stop cuts the
// claims in flight, and one the server finished after its give-back (5 of
// 14 stops in a backlog) leased a batch that waited OUTBOX_LOCK_TIMEOUT
// for the next relay. So the give-back is sent three times over about a
// second; ctx bounds the waits, and each give-back runs for at most
// releaseTokenTimeout even on a cancelled ctx.
func (o *Outbox) ReleaseOrphans(ctx context.Context) {
	for _, wait := range orphanSettle {
		if wait > 0 && !backoff.Sleep(ctx, wait) {
			return
		}
		tokens, from := o.orphans.all()
		if len(tokens) == 0 {
			return
		}
		_ = o.giveBack(ctx, from, tokens)
	}
}

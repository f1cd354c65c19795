package store

import (
	"context"
	"sync"
	"time"

	"github.com/google/uuid"
)

// A claim whose answer never came back may still run on the server later:
// over a link that held its bytes (a half-open network, a blackhole that
// heals, TCP retransmitting the query after the peer came back) the
// statement arrives after the client gave up on it, leases its rows with a
// token nobody holds, and commits. The give-back sent at once
// ([Outbox.releaseToken]) runs on the same broken link and fails with it,
// so those rows would wait a whole lease (OUTBOX_LOCK_TIMEOUT, 60 s by
// default) before any relay may claim them. orphanedClaims remembers such
// tokens and gives their leases back again, on a doubling schedule, from
// the first claim that reaches the database until one lease after it did:
// the late statement lands a moment after the link heals, and each give-back
// reads the whole PENDING index, so it is sent a few times, not on every
// claim.
type orphanedClaims struct {
	mu     sync.Mutex
	claims map[uuid.UUID]*orphan
}

type orphan struct {
	lease time.Duration // the failed claim's lease
	next  time.Time     // when to give it back again
	wait  time.Duration // the wait after the next give-back that reaches the database
	until time.Time     // zero until a give-back reached the database; then forget it after this
}

const (
	// orphanFirstWait is the wait after the first give-back that reached
	// the database; it doubles after each.
	orphanFirstWait = 250 * time.Millisecond
	// maxOrphanedClaims bounds the memory of a long outage, in which every
	// claim fails; the tokens beyond it only expire with their lease, as
	// they would without this.
	maxOrphanedClaims = 1024
)

// add remembers the token of a claim that failed and could not be given back.
func (c *orphanedClaims) add(token uuid.UUID, lease time.Duration, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.claims == nil {
		c.claims = map[uuid.UUID]*orphan{}
	}
	if len(c.claims) >= maxOrphanedClaims {
		return
	}
	c.claims[token] = &orphan{lease: lease, next: now, wait: orphanFirstWait}
}

// due returns the tokens to give back now and moves their next time on, so
// that concurrent claims do not send the same give-back twice.
func (c *orphanedClaims) due(now time.Time) []uuid.UUID {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []uuid.UUID
	for token, o := range c.claims {
		if !o.next.After(now) {
			out = append(out, token)
			o.next = now.Add(o.wait)
		}
	}
	return out
}

// answered records that a give-back of tokens reached the database at now:
// each is tried again after a doubled wait, until one lease has passed
// since the first give-back that reached the database.
func (c *orphanedClaims) answered(tokens []uuid.UUID, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, token := range tokens {
		o, ok := c.claims[token]
		if !ok {
			continue
		}
		if o.until.IsZero() {
			o.until = now.Add(o.lease)
		}
		o.next = now.Add(o.wait)
		o.wait *= 2
		if !o.next.Before(o.until) {
			delete(c.claims, token)
		}
	}
}

// pending is how many tokens are remembered.
func (c *orphanedClaims) pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.claims)
}

// releaseOrphans gives back the leases of the remembered claims that are
// due, for at most releaseTokenTimeout; one that fails is tried again at a
// later claim, after the same wait.
func (o *Outbox) releaseOrphans(ctx context.Context) {
	tokens := o.orphans.due(time.Now())
	if len(tokens) == 0 {
		return
	}
	if o.giveBack(ctx, tokens) == nil {
		o.orphans.answered(tokens, time.Now())
	}
}

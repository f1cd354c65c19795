package relay

import (
	"context"
	"sync"
	"time"

	"github.com/pcp/route-processing/pkg/outbox"
)

// undatedHolders dates the holders of the xmin horizon whose start the
// relay's role may not read (another role's forgotten psql session, when
// the relay's role lacks pg_read_all_stats) from when a refresh first saw
// each: a lower bound of its age, enough for PcpDatabaseXminHorizonHeld to
// fire and for the reindexer to wait, where the age would otherwise stay
// 0. The gauges' refresh and the reindexer read it.
type undatedHolders struct {
	mu   sync.Mutex
	seen map[string]time.Time
}

// age notes keys as seen at now (those seen before keep their first
// sighting), forgets the holders not among them, and returns how long the
// longest-seen one has been seen.
func (u *undatedHolders) age(keys []string, now time.Time) time.Duration {
	u.mu.Lock()
	defer u.mu.Unlock()
	next := make(map[string]time.Time, len(keys))
	var oldest time.Duration
	for _, k := range keys {
		first, ok := u.seen[k]
		if !ok {
			first = now
		}
		next[k] = first
		oldest = max(oldest, now.Sub(first))
	}
	u.seen = next
	return oldest
}

// tableHealth reads the outbox's table health with the undated holders'
// ages folded into OldestXactAge.
func (r *Relay) tableHealth(ctx context.Context) (outbox.TableHealth, error) {
	c, cancel := r.dbCall(ctx)
	defer cancel()
	h, err := r.outbox.TableHealth(c)
	if err != nil {
		return h, err
	}
	h.OldestXactAge = max(h.OldestXactAge, r.undated.age(h.UndatedHolders, time.Now()))
	return h, nil
}

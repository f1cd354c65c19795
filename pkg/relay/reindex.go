package relay

import (
	"context"
	"regexp"
	"time"

	"github.com/pcp/route-processing/pkg/outbox"
)

// The reindexer gives back the space that a held xmin horizon leaves in the
// outbox's indexes. While a snapshot is held, every row marked or deleted
// keeps its old index entries; vacuum removes them once the snapshot ends
// but keeps the pages, so the time-ordered indexes (PENDING, PUBLISHED) stay
// at the size of the hold's backlog. REINDEX INDEX CONCURRENTLY rebuilds one
// with only its live entries while ingest and claims go on.

// IndexStore is what the reindexer needs of the outbox's storage;
// *store.Outbox implements it. The relay runs the reindexer, and exports the
// index sizes, when the Outbox given to New is also an IndexStore.
type IndexStore interface {
	// Indexes lists the outbox's indexes with their sizes and entries.
	Indexes(ctx context.Context) ([]outbox.Index, error)
	// LeaseMaintenance takes the relays' maintenance lease for hold when
	// nobody holds it.
	LeaseMaintenance(ctx context.Context, hold time.Duration) (bool, error)
	// HoldMaintenance sets the held lease to end after hold.
	HoldMaintenance(ctx context.Context, hold time.Duration) error
	// RebuildIndex rebuilds one index without blocking writes; cut short,
	// it may leave an invalid copy that DropIndex removes.
	RebuildIndex(ctx context.Context, name string) error
	// DropIndex drops an index without blocking writes.
	DropIndex(ctx context.Context, name string) error
}

const (
	// compactEntryBytes is what an entry of the outbox's widest index,
	// (route_id, event_type), takes in a freshly built btree: a 56-byte
	// tuple and its 4-byte line pointer at the 90 % leaf fill. The other
	// indexes' entries are smaller, so the estimate errs towards leaving an
	// index alone.
	compactEntryBytes = 68
	// bloatFactor: an index is rebuilt at this many times its compact
	// size. The indexes on random uuids settle at about 70 % full, 1.4×;
	// a held snapshot leaves the PENDING index hundreds of times its size.
	bloatFactor = 4
	// countedShare: an index's entry count is current when it was taken
	// at this share of the index's size or more.
	countedShare = 0.9
	// reindexCheck is how often each relay reads the indexes' sizes.
	reindexCheck = time.Minute
	// reindexHorizonAge: no rebuild while a transaction this old holds the
	// horizon. The entries it keeps cannot be left out of a new index, and
	// REINDEX CONCURRENTLY waits for that transaction to end before it
	// finishes; after the release, vacuum first frees the entries.
	reindexHorizonAge = time.Minute
	// reindexLease bounds one pass (the lease's length while it runs, and
	// the timeout of all its statements together): a rebuild reads the
	// table twice, minutes on a table of tens of gigabytes.
	reindexLease = time.Hour
)

// leftoverIndex matches the names PostgreSQL gives the copies of a REINDEX
// CONCURRENTLY (name_ccnew, name_ccold, with a digit when taken).
var leftoverIndex = regexp.MustCompile(`_cc(new|old)[0-9]*$`)

// reindexPlan is one pass's work: indexes to rebuild and leftovers of an
// interrupted rebuild to drop.
type reindexPlan struct {
	rebuild, drop []outbox.Index
}

// planReindex is the reindexer's rule: rebuild a valid index of at least
// minBytes that is bloatFactor times its compact size or more, by the
// catalog's count of its entries; drop the invalid copies an interrupted
// rebuild left. The count must be current: taken when the index was within
// countedShare of its size (the vacuum that freed a hold's entries leaves
// the pages, so it counts a bloated index at its full size). An index that
// grew since (a count from its build on an empty table, say) or was never
// counted is left alone. Nothing is done while a transaction older than
// reindexHorizonAge holds the horizon (both statements would wait for it).
func planReindex(ixs []outbox.Index, h outbox.TableHealth, minBytes int64) reindexPlan {
	var p reindexPlan
	if h.OldestXactAge > reindexHorizonAge {
		return p
	}
	for _, ix := range ixs {
		switch {
		case !ix.Valid:
			if leftoverIndex.MatchString(ix.Name) {
				p.drop = append(p.drop, ix)
			}
		case ix.Entries >= 0 && ix.Bytes >= minBytes &&
			float64(ix.CountedBytes) >= countedShare*float64(ix.Bytes) &&
			float64(ix.Bytes) >= bloatFactor*compactEntryBytes*max(ix.Entries, 1):
			p.rebuild = append(p.rebuild, ix)
		}
	}
	return p
}

// reindex checks the indexes every reindexCheck (or ReindexInterval, when
// shorter) and runs a pass when one is bloated.
func (r *Relay) reindex(ctx context.Context) {
	every(ctx, min(reindexCheck, r.cfg.ReindexInterval), func() { r.reindexPass(ctx) })
}

// reindexPass rebuilds the bloated indexes if the horizon allows it and
// this relay takes the maintenance lease; the lease then stays held for
// ReindexInterval, so all relays together run at most one pass per
// interval.
func (r *Relay) reindexPass(ctx context.Context) {
	s := r.indexes
	c, cancel := r.dbCall(ctx)
	ixs, err := s.Indexes(c)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			r.logger.DebugContext(ctx, "cannot read outbox index sizes", "err", err)
		}
		return
	}
	h, err := r.tableHealth(ctx)
	if err != nil {
		return
	}
	plan := planReindex(ixs, h, r.cfg.ReindexMinBytes)
	if len(plan.rebuild)+len(plan.drop) == 0 {
		return
	}
	c, cancel = r.dbCall(ctx)
	won, err := s.LeaseMaintenance(c, reindexLease)
	cancel()
	if err != nil || !won {
		return
	}
	pass, cancel := context.WithTimeout(ctx, reindexLease)
	defer cancel()
	for _, ix := range plan.drop {
		if err := s.DropIndex(pass, ix.Name); err != nil {
			r.logger.WarnContext(ctx, "cannot drop the leftover of an interrupted reindex", "index", ix.Name, "err", err)
			continue
		}
		r.logger.InfoContext(ctx, "dropped the leftover of an interrupted reindex", "index", ix.Name, "bytes", ix.Bytes)
	}
	for _, ix := range plan.rebuild {
		r.logger.InfoContext(ctx, "rebuilding a bloated outbox index", "index", ix.Name, "bytes", ix.Bytes, "entries", int64(ix.Entries))
		start := time.Now()
		if err := s.RebuildIndex(pass, ix.Name); err != nil {
			// What it left behind is dropped by the next pass.
			r.logger.WarnContext(ctx, "outbox index rebuild failed; the next pass retries", "index", ix.Name, "err", err)
			continue
		}
		r.m.indexRebuilds.WithLabelValues(ix.Name).Inc()
		r.logger.InfoContext(ctx, "rebuilt outbox index", "index", ix.Name, "took", time.Since(start).Round(time.Millisecond))
	}
	next := r.cfg.ReindexInterval
	if ctx.Err() != nil {
		next = 0 // stopped half way: the next relay may clean up at once
	}
	c, cancel = r.dbCall(context.WithoutCancel(ctx))
	defer cancel()
	if err := s.HoldMaintenance(c, next); err != nil {
		r.logger.WarnContext(ctx, "cannot set the next reindex pass; it waits for the lease to end", "err", err, "lease", reindexLease)
	}
}

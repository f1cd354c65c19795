package ingest

// batchCap is the most records the next batch may take: Config.BatchSize,
// unless writes ran out of their time bound (INGEST_DB_TIMEOUT, or a
// statement_timeout the operator set) while the database answered. Such a
// write is split until its parts fit (writeSlow), after two timeouts at each
// size; a later batch as large as the first would time out and split the
// same way. So the cap drops to the most records a part wrote, and grows
// back by a quarter with each batch that fills it and commits on the first
// attempt, though not to the smallest size that timed out until
// capClearAfter such batches have gone since: a slow spell costs one
// descent, not one per batch nor one every few batches. The poll loop owns
// it.
type batchCap struct {
	full, cur int
	// tooBig is the smallest size that timed out (0: none since clean
	// first-time commits cleared it); clean counts those commits.
	tooBig, clean int
}

// capClearAfter is how many full first-time commits at the cap clear the
// memory of a size that timed out, so that batches may grow past it again
// once the spell is over.
const capClearAfter = 64

func newBatchCap(full int) batchCap { return batchCap{full: full, cur: full} }

// limit is the most records of the next batch.
func (c *batchCap) limit() int { return c.cur }

// observe takes a finished batch that wrote size records: when its write
// timed out and was split, fits is the most records a part then wrote and
// tooBig the smallest part that timed out; fast when it committed on the
// first attempt.
func (c *batchCap) observe(size, fits, tooBig int, fast bool) {
	switch {
	case fits > 0:
		c.cur = max(1, min(c.cur, fits))
		if tooBig > 0 && (c.tooBig == 0 || tooBig < c.tooBig) {
			c.tooBig = tooBig
		}
		c.clean = 0
	case fast && size >= c.cur && c.cur < c.full:
		c.clean++
		if c.tooBig > 0 && c.clean >= capClearAfter {
			c.tooBig = 0
		}
		next := min(c.full, c.cur+max(1, c.cur/4))
		if c.tooBig > 0 {
			next = min(next, max(c.cur, c.tooBig-1))
		}
		c.cur = next
	}
}

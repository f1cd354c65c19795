package ingest

// batchCap is the most records the next batch may take: Config.BatchSize,
// unless writes ran out of their time bound (INGEST_DB_TIMEOUT, or a
// statement_timeout the operator set) while the database answered. Such a
// write is split until its parts fit (writeSlow), after two timeouts at each
// size; a later batch as large as the first would time out and split the
// same way, so the cap drops to the most records a part wrote and grows
// back by a quarter with each batch that fills it and commits on the first
// attempt. A database that is slow for a while thus costs a few timeouts,
// not two per batch. The poll loop owns it.
type batchCap struct {
	full, cur int
}

func newBatchCap(full int) batchCap { return batchCap{full: full, cur: full} }

// limit is the most records of the next batch.
func (c *batchCap) limit() int { return c.cur }

// observe takes a finished batch of size records: fits > 0 when its write
// timed out and was split (the most records a part then wrote), fast when
// it committed on the first attempt.
func (c *batchCap) observe(size, fits int, fast bool) {
	switch {
	case fits > 0:
		c.cur = max(1, min(c.cur, fits))
	case fast && size >= c.cur && c.cur < c.full:
		c.cur = min(c.full, c.cur+max(1, c.cur/4))
	}
}

package outbox

import "time"

// TableHealth is what the relay's housekeeping shows about the database
// behind the outbox: the things that make a SKIP LOCKED queue slow down
// before anything fails.
type TableHealth struct {
	// OldestXactAge is the age of the oldest transaction, snapshot or
	// prepared transaction on the database that holds back the xmin horizon
	// (0 when none): while it
	// lives, vacuum cannot remove the dead tuples of published rows, and
	// every claim scans past them.
	OldestXactAge time.Duration
	// UndatedHolders identifies the holders of the horizon whose start the
	// reading role may not see (sessions of other roles, without
	// pg_read_all_stats: PostgreSQL shows their xids but not their times),
	// each by its pid and xid, stable while it holds. OldestXactAge leaves
	// them out; the caller may date them from when it first saw them.
	UndatedHolders []string
	// LiveTuples and DeadTuples are estimates from the statistics system
	// (pg_stat_user_tables); after a statistics reset the live tuples come
	// from the planner's estimate until the next vacuum or analyze, and
	// the dead ones count from the reset.
	LiveTuples, DeadTuples int64
	// TableBytes is the table's size with its indexes and TOAST.
	TableBytes int64
}

// Index is one index of the outbox table as the catalog sees it.
type Index struct {
	Name string
	// Bytes is the index's size on disk.
	Bytes int64
	// Entries is the catalog's count of its entries (pg_class.reltuples),
	// as of the last vacuum, analyze or build; negative when never counted.
	Entries float64
	// CountedBytes is the index's size when Entries was counted
	// (pg_class.relpages): much below Bytes, the count is older than the
	// index's growth.
	CountedBytes int64
	// Valid is false for a build that did not finish: what an interrupted
	// REINDEX CONCURRENTLY leaves behind.
	Valid bool
}

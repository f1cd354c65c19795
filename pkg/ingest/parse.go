package ingest

import (
	"context"
	"errors"
	"time"

	"github.com/pcp/route-processing/pkg/passport"
)

// The poll loop hands each record to one parser goroutine as it arrives,
// so that records are parsed while the batch ahead of theirs writes. At a
// steady rate a batch waits for its predecessor to run its statements
// (held); parsed only once it goes, its records' parse time would add to
// every batch's turn, and each turn's length is what the next batch's
// records wait. Whoever comes first parses a record: the parser, or its
// batch when the parser is behind (under a backlog, where full batches go
// at once); the other finds it parsed or waits for the parse in progress.

// parseAheadQueue is how many polled records may wait for the parser; when
// it is full the poll loop does not wait: the record's batch parses it.
// Every pending record may be parsed ahead (under a backlog the parser is a
// third goroutine parsing beside the two batches): a parsed passport holds
// at most about its raw record's size again (mostly the WKT, half the
// record on average for passportgen's passports, 0.82 at most), so pending,
// bounded by PauseRecords and PauseBytes, may take up to twice PauseBytes.
func parseAheadQueue(cfg Config) int { return cfg.Pipeline * cfg.BatchSize }

// parseAhead parses the records of q until ctx ends.
func (in *Ingestor) parseAhead(ctx context.Context, q <-chan *item) {
	for {
		select {
		case it := <-q:
			in.parse(it)
		case <-ctx.Done():
			return
		}
	}
}

// queueParse offers it to the parser without waiting.
func (in *Ingestor) queueParse(it *item) {
	select {
	case in.parseQ <- it:
	default:
	}
}

// parse parses it once, whoever calls first; later calls wait for that
// parse and return. Afterwards exactly one of it.passport and it.cerr is
// set.
func (in *Ingestor) parse(it *item) {
	it.parseOnce.Do(func() {
		p, err := passport.Parse(it.rec().Value, in.cfg.Limits)
		if err != nil {
			var ce *passport.ContractError
			if !errors.As(err, &ce) {
				ce = &passport.ContractError{Reason: err.Error()}
			}
			it.cerr = ce
			return
		}
		it.passport = p
		it.parsed = time.Now()
		in.metrics.stageParsed.Observe(it.parsed.Sub(it.fetched).Seconds())
	})
}

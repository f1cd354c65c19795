package ingest

import (
	"errors"
	"time"

	"github.com/pcp/route-processing/pkg/passport"
)

// The poll loop parses pending records while it would otherwise wait in
// Poll (a batch held behind the one ahead, or both pipeline slots busy),
// so that records are parsed while the batch ahead of theirs writes. At a
// steady rate a batch waits until its predecessor has committed (held, at
// most holdMax); parsed only once it goes, its records' parse time would add to
// every batch's turn, and each turn's length is what the next batch's
// records wait. A batch parses whatever the loop has not reached. The loop
// does the early parsing itself, rather than a parser goroutine, so that no
// goroutine is woken per record (at 1,000 records/s such a parser cost the
// ingestor about 0.03 cores), and a record belongs to one goroutine at a
// time: the loop's while pending, its batch's once dispatched.
//
// Every pending record may be parsed early (under a backlog the loop is a
// third goroutine parsing beside the two batches): a parsed passport holds
// at most about its raw record's size again (mostly the WKT, half the
// record on average for passportgen's passports, 0.82 at most), so pending,
// bounded by PauseRecords and PauseBytes, may take up to twice PauseBytes.

// parseNext parses the first pending record not parsed yet and reports
// whether there was one.
func (in *Ingestor) parseNext() bool {
	for ; in.parsedUpTo < len(in.pending); in.parsedUpTo++ {
		if it := in.pending[in.parsedUpTo]; !it.isParsed() {
			in.parse(it)
			in.parsedUpTo++
			return true
		}
	}
	return false
}

func (it *item) isParsed() bool { return it.acc.Passport != nil || it.cerr != nil }

// parse parses it unless it is parsed already. Afterwards exactly one of
// it.acc.Passport and it.cerr is set.
func (in *Ingestor) parse(it *item) {
	if it.isParsed() {
		return
	}
	p, err := passport.Parse(it.rec().Value, in.cfg.Limits)
	if err != nil {
		var ce *passport.ContractError
		if !errors.As(err, &ce) {
			ce = &passport.ContractError{Reason: err.Error()}
		}
		it.cerr = ce
		return
	}
	it.acc.Passport = p
	it.parsed = time.Now()
	in.metrics.stageParsed.Observe(it.parsed.Sub(it.fetched).Seconds())
}

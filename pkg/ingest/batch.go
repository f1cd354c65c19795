package ingest

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/pcp/route-processing/pkg/passport"
	"github.com/pcp/route-processing/pkg/record"
)

// item is one polled record on its way through a batch.
type item struct {
	// acc.Source is the polled record; acc.Passport is set by the parse
	// when it is valid (parse.go), acc.Events by its batch (process).
	acc   passport.Accepted
	epoch uint64 // assignment epoch of the record's partition when polled
	gen   uint64 // the tracker's gen of the record's offset (tracker.Truncate)

	// cerr is the parse's outcome for an invalid record (acc.Passport for a
	// valid one), set by the poll loop while the record is pending or by
	// its batch (parse.go).
	cerr *passport.ContractError

	// fetched and parsed: when Poll returned the record and when it was
	// parsed (the stage histogram's points).
	fetched, parsed time.Time

	// span is the record's span when tracing is on and the record had a
	// valid traceparent.
	span trace.Span

	// done: written to the database or acknowledged by the DLQ. Written by
	// the batch goroutines, read by the poll loop after the batch result.
	done bool
}

// rec is the polled record.
func (it *item) rec() *record.Record { return &it.acc.Source }

// batch is a unit of work of the pipeline. Its signals order it after
// its predecessor (see the package documentation):
//
//   - applied: the fast attempt's statements ran (the batch holds its row
//     locks) or will not run; applyFailed says which.
//   - fastDone: the fast attempt committed or rolled back; fastFailed says
//     whether it failed (or, for a batch that waited for its predecessor,
//     the predecessor's did), in which case successors that wait for it
//     roll back too. The poll loop holds a batch that is not full until
//     the newest batch's fastDone (Ingestor.held).
//   - dbDone: every valid record of the batch is written or dead-lettered
//     (or abandoned at shutdown).
//   - reported: the batch's result went to the poll loop, which happens in
//     dispatch order.
type batch struct {
	items   []*item
	prev    *batch
	started time.Time // dispatched

	// routes are the route ids of the valid records, set before parsed is
	// closed and never changed afterwards.
	routes map[string]struct{}
	parsed chan struct{}

	applied     chan struct{}
	applyFailed bool
	fastDone    chan struct{}
	fastFailed  bool
	dbDone      chan struct{}
	reported    chan struct{}
	// wrote is how many valid records the batch had to write; fits and
	// tooBig are set when a write of it timed out while the database
	// answered and was split: the most records one part then wrote and the
	// smallest part that timed out (batchcap.go). Read by the poll loop
	// after dbDone.
	wrote, fits, tooBig int
}

func newBatch(items []*item, prev *batch) *batch {
	return &batch{
		items: items, prev: prev, started: time.Now(), parsed: make(chan struct{}),
		applied: make(chan struct{}), fastDone: make(chan struct{}), dbDone: make(chan struct{}),
		reported: make(chan struct{}),
	}
}

// wait blocks until ch is closed or ctx ends.
func wait(ctx context.Context, ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	case <-ctx.Done():
		return false
	}
}

// process runs one batch to completion: parse (what the poll loop has not
// parsed yet), dead-letter contract errors and write the valid records.
func (in *Ingestor) process(ctx context.Context, b *batch) {
	start := time.Now()
	ctx, endSpans := in.traceBatch(ctx, b)
	defer endSpans()
	var valid, invalid []*item
	for _, it := range b.items {
		in.parse(it)
		if it.cerr != nil {
			invalid = append(invalid, it)
			continue
		}
		it.acc = passport.AcceptTraced(it.acc.Passport, it.acc.Source, in.cfg.Events, recordTraceparent(it))
		valid = append(valid, it)
	}
	b.routes = make(map[string]struct{}, len(valid))
	for _, it := range valid {
		b.routes[it.acc.Passport.RouteID] = struct{}{}
	}
	close(b.parsed)

	var dlqDone sync.WaitGroup
	if len(invalid) > 0 {
		dlqDone.Add(1)
		go func() {
			defer dlqDone.Done()
			in.deadLetter(ctx, invalid, contractReason)
		}()
	}
	in.write(ctx, b, valid)
	dlqDone.Wait()
	b.prev = nil // keep the chain short

	in.metrics.batchSize.Observe(float64(len(b.items)))
	in.metrics.batchDuration.Observe(time.Since(start).Seconds())
}

func overlaps(a, b map[string]struct{}) bool {
	if len(b) < len(a) {
		a, b = b, a
	}
	for k := range a {
		if _, ok := b[k]; ok {
			return true
		}
	}
	return false
}

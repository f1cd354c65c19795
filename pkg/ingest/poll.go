package ingest

import (
	"context"
	"time"
)

// loop polls records into pending and dispatches batches until ctx ends,
// Poll fails or BeforeCommit stopped it. Batches run on batchCtx.
func (in *Ingestor) loop(ctx, batchCtx context.Context) error {
	for {
		in.drainResults()
		if in.stopped {
			return in.hookErr
		}
		if ctx.Err() != nil {
			return nil
		}
		in.dispatch(batchCtx)
		in.commit(ctx, nil, 0, false)
		if in.stopped {
			return in.hookErr
		}
		in.flowControl(ctx)
		in.updateLag()

		timeout := in.pollTimeout()
		if timeout > 0 && in.parseNext() {
			timeout = 0 // parsed instead of waiting; look again at once
		}
		rec, err := in.consumer.Poll(timeout)
		if err != nil {
			return err
		}
		fetched := time.Now()
		if rec == nil {
			in.caughtUp = true
			continue
		}
		in.caughtUp = false
		epoch, ok := in.ownedEpoch(rec.Partition)
		if !ok {
			continue // a straggler of a revoked partition
		}
		if !in.tracker.Add(rec.Partition, rec.Offset) {
			continue // already polled in this assignment
		}
		if len(in.pending) == 0 {
			in.pendingSince = time.Now()
		}
		if !rec.Timestamp.IsZero() {
			in.metrics.stageFetched.Observe(fetched.Sub(rec.Timestamp).Seconds())
		}
		it := &item{epoch: epoch, fetched: fetched}
		it.acc.Source = *rec
		in.pending = append(in.pending, it)
		in.pendingBytes += len(rec.Value)
	}
}

func (in *Ingestor) pollTimeout() time.Duration {
	switch {
	case in.outage():
		return 50 * time.Millisecond
	case in.batchFull():
		// A full batch waits for a slot; results arrive over a channel
		// that Poll cannot watch, so look again soon.
		return 2 * time.Millisecond
	case len(in.pending) > 0:
		if in.inflight >= in.cfg.Pipeline || in.held() {
			// Waiting for a slot, or for the batch in flight to have
			// written, as above.
			return 2 * time.Millisecond
		}
		if in.cfg.BatchMaxWait == 0 {
			// A slot is free and the batch goes once Poll has nothing
			// more: take, without waiting, what the client has already
			// fetched.
			return 0
		}
		return max(time.Until(in.pendingSince.Add(in.cfg.BatchMaxWait)), time.Millisecond)
	case in.inflight > 0:
		return 5 * time.Millisecond
	}
	return 100 * time.Millisecond
}

// batchFull reports whether the pending records fill a batch, by count or
// by bytes.
func (in *Ingestor) batchFull() bool {
	return len(in.pending) >= in.cfg.BatchSize || in.pendingBytes >= in.cfg.BatchBytes
}

// batchDue reports whether the pending records should go now: a full
// batch always; with BatchMaxWait 0 (the default) as soon as the client has
// nothing more to give (caughtUp: pending holds all that has arrived);
// otherwise once the oldest record waited BatchMaxWait.
func (in *Ingestor) batchDue() bool {
	if in.batchFull() {
		return true
	}
	if in.cfg.BatchMaxWait == 0 {
		return in.caughtUp
	}
	return time.Since(in.pendingSince) >= in.cfg.BatchMaxWait
}

// held reports whether a batch that is not full must wait because the
// newest batch in flight is not committing yet (batch.committing: it is
// still running its statements). Dispatched at once, the second slot would
// take the one or two records that arrived since the first batch left, and
// at a steady rate every other transaction would carry almost nothing: the
// same records in twice the transactions, on a database that is CPU-bound.
// Held until the batch ahead is committing, the next batch takes what
// arrived meanwhile, so batches grow with the load; an idle record, with
// nothing in flight, still goes at once. A full batch is never held: under
// a backlog its parsing overlaps the write ahead of it.
func (in *Ingestor) held() bool {
	if in.last == nil || in.batchFull() {
		return false
	}
	return !closed(in.last.committing)
}

// dispatch starts batches while there are slots and due batches.
func (in *Ingestor) dispatch(ctx context.Context) {
	for in.inflight < in.cfg.Pipeline && len(in.pending) > 0 && in.batchDue() && !in.held() {
		// Up to BatchSize records and BatchBytes bytes, at least one.
		n, size := 0, 0
		for n < len(in.pending) && n < in.cfg.BatchSize {
			v := len(in.pending[n].rec().Value)
			if n > 0 && size+v > in.cfg.BatchBytes {
				break
			}
			size += v
			n++
		}
		items := make([]*item, n)
		copy(items, in.pending[:n])
		rest := copy(in.pending, in.pending[n:])
		clear(in.pending[rest:])
		in.pending = in.pending[:rest]
		in.unparsed = max(in.unparsed-n, 0)
		for _, it := range items {
			in.pendingBytes -= len(it.rec().Value)
			in.dispatched[it.rec().Partition]++
		}
		in.pendingSince = time.Now()
		in.seq++
		b := newBatch(in.seq, items, in.last)
		in.last = b
		in.inflight++
		in.wg.Add(1)
		go func() {
			defer in.wg.Done()
			in.process(ctx, b)
			in.results <- b
		}()
	}
}

func (in *Ingestor) drainResults() {
	for {
		select {
		case b := <-in.results:
			in.finish(b)
		default:
			return
		}
	}
}

// finish takes a batch's outcome into the tracker.
func (in *Ingestor) finish(b *batch) {
	in.inflight--
	for _, it := range b.items {
		in.dispatched[it.rec().Partition]--
		if it.done && in.stillOwned(it) {
			in.tracker.Done(it.rec().Partition, it.rec().Offset)
		}
	}
	if in.last == b {
		in.last = nil
	}
	b.items = nil // let the records go
}

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
		if in.hookErr != nil {
			return in.hookErr
		}
		if ctx.Err() != nil {
			return nil
		}
		in.dispatch(batchCtx)
		in.commit(ctx, nil, 0, false)
		if in.hookErr != nil {
			return in.hookErr
		}
		in.flowControl(ctx)
		in.updateLag()

		timeout, slot := in.pollTimeout()
		if in.commitPending() {
			// An idle loop would otherwise sleep past the held commit.
			timeout = min(timeout, max(in.commitWait(), time.Millisecond))
		}
		if timeout > 0 && in.parseNext() {
			timeout = 0 // parsed instead of waiting; look again at once
		}
		if slot && timeout > 0 {
			// Take what the client holds without blocking, and wait in
			// Go once it holds nothing: a Poll blocked in cgo keeps the
			// runtime's monitor thread (sysmon) waking every 20 µs for
			// as long as it blocks, a tenth of the ingestor's CPU
			// under a backlog.
			if in.caughtUp {
				in.awaitSlot(ctx, timeout)
			}
			timeout = 0
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
		gen, ok := in.tracker.Add(rec.Partition, rec.Offset)
		if !ok {
			in.onRewound(ctx, rec.Partition, rec.Offset)
			gen, _ = in.tracker.Add(rec.Partition, rec.Offset)
		}
		if !rec.Timestamp.IsZero() {
			in.metrics.stageFetched.Observe(fetched.Sub(rec.Timestamp).Seconds())
		}
		it := &item{epoch: epoch, gen: gen, fetched: fetched}
		it.acc.Source = *rec
		in.pending = append(in.pending, it)
		in.pendingBytes += len(rec.Value)
	}
}

// pollTimeout is how long the next Poll may wait for a record; slot
// reports that the pending records wait for a batch slot or for the batch
// ahead to commit, which arrive over channels that Poll cannot watch (see
// awaitSlot).
func (in *Ingestor) pollTimeout() (d time.Duration, slot bool) {
	switch {
	case in.blocksBatches():
		return 50 * time.Millisecond, false
	case in.batchFull():
		// A full batch waits for a slot.
		return 2 * time.Millisecond, true
	case len(in.pending) > 0:
		if in.inflight >= in.cfg.Pipeline || in.held() {
			// Waiting for a slot, or for the batch in flight to have
			// written.
			return 2 * time.Millisecond, true
		}
		if in.cfg.BatchMaxWait == 0 {
			// A slot is free and the batch goes once Poll has nothing
			// more: take, without waiting, what the client has already
			// fetched.
			return 0, false
		}
		return max(time.Until(in.pending[0].fetched.Add(in.cfg.BatchMaxWait)), time.Millisecond), false
	case in.inflight > 0:
		return 5 * time.Millisecond, false
	}
	return 100 * time.Millisecond, false
}

// awaitSlot waits up to d for what lets the pending records go: a batch in
// flight reporting (its slot frees) or, while the next batch is held, the
// newest one committed. Short, because the client must still be polled.
func (in *Ingestor) awaitSlot(ctx context.Context, d time.Duration) {
	var committed <-chan struct{}
	if in.held() {
		committed = in.last.fastDone
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case b := <-in.results:
		in.finish(b)
	case <-committed:
	case <-t.C:
	case <-ctx.Done():
	}
}

// batchFull reports whether the pending records fill a batch, by count or
// by bytes.
func (in *Ingestor) batchFull() bool {
	return len(in.pending) >= in.batchCap.limit() || in.pendingBytes >= in.cfg.BatchBytes
}

// batchDue reports whether the pending records (at least one) should go
// now: a full batch always; with BatchMaxWait 0 (the default) as soon as
// the client has nothing more to give (caughtUp: pending holds all that
// has arrived); otherwise once the oldest pending record has waited
// BatchMaxWait since it was fetched (records a batch left behind do not
// start their wait again).
func (in *Ingestor) batchDue() bool {
	if in.batchFull() {
		return true
	}
	if in.cfg.BatchMaxWait == 0 {
		return in.caughtUp
	}
	return time.Since(in.pending[0].fetched) >= in.cfg.BatchMaxWait
}

// held reports whether a batch that is not full must wait because the
// newest batch in flight has not committed yet (batch.fastDone).
// Dispatched at once, the second slot would take the one or two records
// that arrived since the first batch left: at a steady rate the same
// records in more, smaller transactions, each with its own commit and
// notification, on a database that is CPU-bound. Held until the batch
// ahead has committed, the next batch takes what arrived during that
// commit, so batches grow with the load; an idle record, with nothing in
// flight, still goes at once. A full batch is never held: under a backlog
// the two slots write at once. Nor is a batch held for longer than
// holdMax: a batch ahead that takes that long waits for something (a row
// lock, a stalled disk), and the records behind it go beside it, where
// they wait for it only if they share a route (writeFast).
//
// Until 2026-12-06 the hold ended when the batch ahead was committing,
// which a one-round-trip write is from its start: at 1,000 passports/s
// most batches went beside the one ahead (docs/performance.md, Small
// batches wait for the commit ahead).
func (in *Ingestor) held() bool {
	if in.last == nil || in.batchFull() {
		return false
	}
	return !closed(in.last.fastDone) && time.Since(in.last.started) < holdMax
}

// holdMax bounds Ingestor.held: many times a commit at 1,000 passports/s
// on a loaded 2-core machine (p99 about 40 ms), and short beside the
// write's own time bound (DBTimeoutFor: seconds).
const holdMax = 250 * time.Millisecond

// dispatch starts batches while there are slots and due batches.
func (in *Ingestor) dispatch(ctx context.Context) {
	// No batch starts while consumption waits for a dependency: its
	// contract errors would be dead-lettered while the database is
	// unavailable (contract §1.5), its valid records only retried.
	for in.inflight < in.cfg.Pipeline && len(in.pending) > 0 && in.batchDue() && !in.held() && !in.blocksBatches() {
		// Up to BatchSize records (or the cap: batchcap.go) and
		// BatchBytes bytes, at least one.
		n, size := 0, 0
		for n < len(in.pending) && n < in.batchCap.limit() {
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
		in.parsedUpTo = max(in.parsedUpTo-n, 0)
		for _, it := range items {
			in.pendingBytes -= len(it.rec().Value)
			in.dispatched[it.rec().Partition]++
		}
		prev := in.last
		b := newBatch(items, prev)
		in.last = b
		in.inflight++
		in.wg.Add(1)
		go func() {
			defer in.wg.Done()
			in.process(ctx, b)
			// Report in dispatch order, so that a slot frees only when
			// every earlier batch is done: a batch that shares no route
			// with the one ahead commits without waiting for it
			// (writeFast), and the batch after it must still find
			// nothing but its own predecessor unfinished. prev always
			// reports: process returns once ctx ends.
			if prev != nil {
				<-prev.reported
			}
			in.results <- b
			close(b.reported)
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

// finishWhile finishes batches as they report while waiting holds, until
// deadline: a revocation waits for its partitions' batches, a stop for all.
// Once stop is closed (nil: never), the deadline is at most the shutdown's.
func (in *Ingestor) finishWhile(stop <-chan struct{}, deadline time.Time, waiting func() bool) {
	for waiting() && time.Now().Before(deadline) {
		select {
		case b := <-in.results:
			in.finish(b)
		case <-stop:
			// Stopping: a revocation's wait ends with the shutdown's.
			stop = nil
			if d := in.shutdownDeadline(); d.Before(deadline) {
				deadline = d
			}
		case <-time.After(time.Until(deadline)):
		}
	}
}

// shutdownDeadline is when the shutdown stops waiting for batches in
// flight: ShutdownTimeout after the poll goroutine first saw the stop. One
// deadline, so that a revocation waiting when the stop comes (its own
// bound is RevokeTimeout) and the shutdown's wait after it do not add up
// past the contract's 30 s.
func (in *Ingestor) shutdownDeadline() time.Time {
	if in.stopAt.IsZero() {
		in.stopAt = time.Now()
	}
	return in.stopAt.Add(in.cfg.ShutdownTimeout)
}

// finish takes a batch's outcome into the tracker.
func (in *Ingestor) finish(b *batch) {
	in.inflight--
	for _, it := range b.items {
		in.dispatched[it.rec().Partition]--
		if it.done && in.stillOwned(it) {
			in.tracker.Done(it.rec().Partition, it.rec().Offset, it.gen)
		}
	}
	if in.last == b {
		in.last = nil
	}
	in.adaptBatchCap(b)
	b.items = nil // let the records go
}

// adaptBatchCap takes b's write into the batch cap (batchcap.go) and says
// when batches shrink below Config.BatchSize or are back to it.
func (in *Ingestor) adaptBatchCap(b *batch) {
	was := in.batchCap.limit()
	in.batchCap.observe(b.wrote, b.fits, b.tooBig, !b.fastFailed)
	now := in.batchCap.limit()
	switch {
	case now < was && was == in.cfg.BatchSize:
		in.logger.Warn("writes of a full batch run out of their time bound while the database answers; smaller batches until they fit again",
			"batch_size", in.cfg.BatchSize, "cap", now)
	case now == in.cfg.BatchSize && was < now:
		in.logger.Info("batches are back to their full size", "batch_size", now)
	}
}

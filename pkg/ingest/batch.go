package ingest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pcp/route-processing/pkg/passport"
	"github.com/pcp/route-processing/pkg/store"
)

// item is one polled record on its way through a batch.
type item struct {
	rec   Record
	epoch uint64 // assignment epoch of rec.Partition when polled

	p    *passport.Passport      // parsed passport, when valid
	cerr *passport.ContractError // contract error, when invalid

	// done: written to the database or acknowledged by the DLQ. Written by
	// the batch goroutines, read by the poll loop after the batch result.
	done bool
}

// batch is a unit of work of the pipeline. Its three signals order it after
// its predecessor (see the package documentation):
//
//   - applied: the fast attempt's statements ran (the batch holds its row
//     locks) or will not run; applyFailed says which.
//   - fastDone: the fast attempt committed or rolled back; fastFailed says
//     whether it (or any predecessor's) failed, in which case successors
//     roll back too.
//   - dbDone: every valid record of the batch is written or dead-lettered
//     (or abandoned at shutdown).
type batch struct {
	seq   uint64
	items []*item
	prev  *batch

	// routes are the route ids of the valid records, set before parsed is
	// closed and never changed afterwards.
	routes map[string]struct{}
	parsed chan struct{}

	applied     chan struct{}
	applyFailed bool
	fastDone    chan struct{}
	fastFailed  bool
	dbDone      chan struct{}
}

func newBatch(seq uint64, items []*item, prev *batch) *batch {
	return &batch{
		seq: seq, items: items, prev: prev, parsed: make(chan struct{}),
		applied: make(chan struct{}), fastDone: make(chan struct{}), dbDone: make(chan struct{}),
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

// process runs one batch to completion: parse, dead-letter contract errors
// and write the valid records.
func (in *Ingestor) process(ctx context.Context, b *batch) {
	start := time.Now()
	var valid, invalid []*item
	for _, it := range b.items {
		p, err := passport.Parse(it.rec.Value, in.cfg.Limits)
		if err != nil {
			var ce *passport.ContractError
			if !errors.As(err, &ce) {
				ce = &passport.ContractError{Reason: err.Error()}
			}
			it.cerr = ce
			invalid = append(invalid, it)
			continue
		}
		it.p = p
		valid = append(valid, it)
	}
	b.routes = make(map[string]struct{}, len(valid))
	for _, it := range valid {
		b.routes[it.p.RouteID] = struct{}{}
	}
	close(b.parsed)

	var dlqDone sync.WaitGroup
	if len(invalid) > 0 {
		dlqDone.Add(1)
		go func() {
			defer dlqDone.Done()
			in.deadLetter(ctx, invalid, contractLetter)
		}()
	}
	in.write(ctx, b, valid)
	dlqDone.Wait()
	b.prev = nil // keep the chain short

	in.metrics.batchSize.Observe(float64(len(b.items)))
	in.metrics.batchDuration.Observe(time.Since(start).Seconds())
}

// write writes the valid records of b: the pipelined fast attempt, then,
// if it failed, the careful way.
func (in *Ingestor) write(ctx context.Context, b *batch, valid []*item) {
	defer close(b.dbDone)
	if len(valid) > 0 {
		in.dbWriters.Add(1)
		defer in.dbWriters.Add(-1)
	}
	err := in.writeFast(ctx, b, valid)
	if err == nil {
		in.markWritten(valid)
		return
	}
	if b.prev != nil && !wait(ctx, b.prev.dbDone) {
		return
	}
	in.writeSlow(ctx, valid, err)
}

// errPredecessorFailed aborts a fast attempt whose predecessor failed.
var errPredecessorFailed = errors.New("predecessor batch failed")

// writeFast writes valid in one transaction, ordered after b.prev. It
// always closes b.applied and b.fastDone.
func (in *Ingestor) writeFast(ctx context.Context, b *batch, valid []*item) (err error) {
	prev := b.prev
	appliedClosed := false
	defer func() {
		if !appliedClosed {
			b.applyFailed = true
			close(b.applied)
		}
		b.fastFailed = err != nil
		close(b.fastDone)
	}()

	if len(valid) == 0 {
		// Nothing to write, but successors must still see the state of
		// the chain before this batch.
		if prev != nil {
			if !wait(ctx, prev.applied) {
				return ctx.Err()
			}
			b.applyFailed = prev.applyFailed
			appliedClosed = true
			close(b.applied)
			if !wait(ctx, prev.fastDone) {
				return ctx.Err()
			}
			if prev.fastFailed {
				return errPredecessorFailed
			}
		}
		return nil
	}

	// Take a connection and begin while the predecessor works.
	tx, err := in.begin(ctx)
	if err != nil {
		in.noteDBError(ctx, err)
		return err
	}
	defer func() {
		if err != nil {
			in.rollback(ctx, tx)
		}
	}()
	if prev != nil {
		if !wait(ctx, prev.parsed) {
			return ctx.Err()
		}
		// A predecessor touching none of our routes cannot hold a lock we
		// need nor be overwritten by us: write concurrently (PostgreSQL is
		// CPU-bound here, and two backends use both cores). Otherwise wait
		// until it holds its row locks, so that our rows queue behind its.
		if overlaps(b.routes, prev.routes) {
			if !wait(ctx, prev.applied) {
				return ctx.Err()
			}
			if prev.applyFailed {
				return errPredecessorFailed
			}
		}
	}
	if err := in.txWrite(ctx, tx, valid); err != nil {
		in.noteDBError(ctx, err)
		return err
	}
	appliedClosed = true
	close(b.applied)
	if prev != nil {
		if !wait(ctx, prev.fastDone) {
			return ctx.Err()
		}
		if prev.fastFailed {
			return errPredecessorFailed
		}
	}
	if err := in.txCommit(ctx, tx); err != nil {
		in.noteDBError(ctx, err)
		return err
	}
	in.dbHealth.ok(ctx)
	return nil
}

// rollbackTimeout bounds a rollback: on a broken connection it fails fast
// anyway, and the server ends the transaction when the connection closes.
const rollbackTimeout = 5 * time.Second

// begin, txWrite and txCommit make one database call each, bounded by
// Config.WriteTimeout; waits for other batches happen between them, outside
// the bound.
func (in *Ingestor) begin(ctx context.Context) (WriteTx, error) {
	cctx, cancel := context.WithTimeout(ctx, in.cfg.WriteTimeout)
	defer cancel()
	return in.store.Begin(cctx)
}

func (in *Ingestor) txWrite(ctx context.Context, tx WriteTx, items []*item) error {
	cctx, cancel := context.WithTimeout(ctx, in.cfg.WriteTimeout)
	defer cancel()
	return tx.Write(cctx, ingestRecords(items))
}

func (in *Ingestor) txCommit(ctx context.Context, tx WriteTx) error {
	cctx, cancel := context.WithTimeout(ctx, in.cfg.WriteTimeout)
	defer cancel()
	return tx.Commit(cctx)
}

func (in *Ingestor) rollback(ctx context.Context, tx WriteTx) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
	defer cancel()
	_ = tx.Rollback(rctx)
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

// noteDBError reports an unavailable database at once, so the poll loop
// pauses without waiting for the retries.
func (in *Ingestor) noteDBError(ctx context.Context, err error) {
	if store.Classify(err) == store.KindUnavailable && ctx.Err() == nil {
		in.dbHealth.fail(ctx, err)
	}
}

// writeSlow writes items, in order, one transaction per span: a span the
// database refuses because of one record is split in halves until that
// record is alone; a lone refused record is retried RecordRetries times and
// then dead-lettered as RETRYABLE. While the database is unavailable the
// same span is retried with backoff; a span of several records that keeps
// failing so while the database answers pings is split in halves too, in
// case its size is the problem (a statement too large, a timeout). It
// returns when every record is written or dead-lettered, or when ctx ends.
func (in *Ingestor) writeSlow(ctx context.Context, items []*item, firstErr error) {
	queue := [][]*item{items}
	if store.Classify(firstErr) == store.KindRecord && len(items) > 1 {
		queue = halves(items)
	}
	bo := newBackoff(in.cfg.MinBackoff, in.cfg.MaxBackoff)
	refused := map[*item]int{}
	unavailable := 0 // failures in a row of queue[0] as unavailable
	for len(queue) > 0 {
		span := in.ownedItems(queue[0])
		if len(span) == 0 {
			queue = queue[1:]
			continue
		}
		queue[0] = span
		err := in.writeOnce(ctx, span)
		if store.Classify(err) != store.KindUnavailable {
			unavailable = 0
		}
		switch store.Classify(err) {
		case store.KindNone:
			in.dbHealth.ok(ctx)
			bo.reset()
			in.markWritten(span)
			queue = queue[1:]
		case store.KindCanceled:
			return
		case store.KindRecord:
			in.dbHealth.ok(ctx) // it answered
			bo.reset()
			if len(span) > 1 {
				queue = append(halves(span), queue[1:]...)
				continue
			}
			it := span[0]
			refused[it]++
			if refused[it] <= in.cfg.RecordRetries {
				in.logger.WarnContext(ctx, "ingest: database refused a record; retrying it",
					append(recordAttrs(it), "attempt", refused[it], "err", err)...)
				if !sleep(ctx, in.cfg.MinBackoff*time.Duration(refused[it])) {
					return
				}
				continue
			}
			in.deadLetter(ctx, span, databaseLetter(err, refused[it]))
			queue = queue[1:]
		default:
			if ctx.Err() != nil {
				return
			}
			in.dbHealth.fail(ctx, err)
			unavailable++
			if len(span) > 1 && unavailable >= splitAfterFailures && in.pings(ctx) {
				in.logger.WarnContext(ctx, "ingest: the database answers but keeps failing a write; splitting it",
					"records", len(span), "attempts", unavailable, "err", err)
				queue = append(halves(span), queue[1:]...)
				unavailable = 0
			}
			if !sleep(ctx, bo.next()) {
				return
			}
		}
	}
}

// splitAfterFailures is how many times in a row a span of several records
// fails as "unavailable" while the database answers pings before it is
// split.
const splitAfterFailures = 2

// pings reports whether the database answers a ping within 5s.
func (in *Ingestor) pings(ctx context.Context) bool {
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return in.store.Ping(pctx) == nil
}

// ownedItems filters out records whose partition was revoked since they were
// polled: a batch retrying through an outage stops working for a partition
// another member now owns.
func (in *Ingestor) ownedItems(items []*item) []*item {
	out := items[:0:0]
	for _, it := range items {
		if in.stillOwned(it) {
			out = append(out, it)
		}
	}
	return out
}

func (in *Ingestor) writeOnce(ctx context.Context, items []*item) (err error) {
	tx, err := in.begin(ctx)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			in.rollback(ctx, tx)
		}
	}()
	if err := in.txWrite(ctx, tx, items); err != nil {
		return err
	}
	return in.txCommit(ctx, tx)
}

func (in *Ingestor) markWritten(items []*item) {
	for _, it := range items {
		it.done = true
	}
	in.metrics.success.Add(float64(len(items)))
}

func halves(items []*item) [][]*item {
	mid := len(items) / 2
	return [][]*item{items[:mid:mid], items[mid:]}
}

func ingestRecords(items []*item) []store.IngestRecord {
	out := make([]store.IngestRecord, len(items))
	for i, it := range items {
		out[i] = store.IngestRecord{
			Passport:    it.p,
			Topic:       it.rec.Topic,
			Partition:   it.rec.Partition,
			Offset:      it.rec.Offset,
			Key:         it.rec.Key,
			Value:       it.rec.Value,
			Traceparent: headerValue(it.rec.Headers, "traceparent"),
		}
	}
	return out
}

func headerValue(hs []Header, key string) *string {
	for _, h := range hs {
		if h.Key == key {
			s := string(h.Value)
			return &s
		}
	}
	return nil
}

// letter says why a record is dead-lettered.
type letter struct {
	fqcn     string
	message  string
	category passport.Category
	field    string
}

// Error class names of the kafka_dlt-exception-fqcn header.
const (
	FQCNContractViolation  = "pcp.route.ContractViolation"
	FQCNDatabaseRejection  = "pcp.route.DatabaseRejection"
	dbRejectedMessageStart = "database rejected the record"
)

func contractLetter(it *item) letter {
	return letter{
		fqcn:     FQCNContractViolation,
		message:  it.cerr.Reason,
		category: passport.CategoryContract,
		field:    it.cerr.Field,
	}
}

func databaseLetter(err error, attempts int) func(*item) letter {
	msg := fmt.Sprintf("%s after %d attempts", dbRejectedMessageStart, attempts)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		// Message and code only: the detail may quote the data.
		msg += fmt.Sprintf(": %s (SQLSTATE %s)", pgErr.Message, pgErr.Code)
		if pgErr.ColumnName != "" {
			msg += ", column " + pgErr.ColumnName
		}
	}
	return func(*item) letter {
		return letter{fqcn: FQCNDatabaseRejection, message: msg, category: passport.CategoryRetryable}
	}
}

// deadLetter copies items to the DLQ and marks each done once acknowledged.
// A failed write is retried with backoff (component "dlq" not ready
// meanwhile) until it succeeds or ctx ends: nothing is skipped.
func (in *Ingestor) deadLetter(ctx context.Context, items []*item, why func(*item) letter) {
	bo := newBackoff(in.cfg.MinBackoff, in.cfg.MaxBackoff)
	for {
		items = in.ownedItems(items)
		if len(items) == 0 {
			return
		}
		msgs := make([]DLQMessage, len(items))
		letters := make([]letter, len(items))
		for i, it := range items {
			letters[i] = why(it)
			msgs[i] = dlqMessage(it.rec, in.cfg.ConsumerGroup, letters[i])
		}
		errs := in.dlq.Produce(ctx, msgs)
		var failed []*item
		var firstErr error
		for i, err := range errs {
			if err != nil {
				failed = append(failed, items[i])
				firstErr = cmpErr(firstErr, err)
				continue
			}
			it, l := items[i], letters[i]
			it.done = true
			in.metrics.failure.WithLabelValues(string(l.category)).Inc()
			in.logger.WarnContext(ctx, "ingest: record dead-lettered",
				append(recordAttrs(it), "category", string(l.category), "field", l.field, "error_class", l.fqcn, "reason", l.message)...)
		}
		if len(failed) == 0 {
			in.dlqHealth.ok(ctx)
			return
		}
		if ctx.Err() != nil {
			return
		}
		in.dlqHealth.fail(ctx, firstErr)
		items = failed
		if !sleep(ctx, bo.next()) {
			return
		}
	}
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// recordAttrs are the log attributes of a record: identifiers and sizes,
// never the payload.
func recordAttrs(it *item) []any {
	attrs := []any{
		slog.String("topic", it.rec.Topic),
		slog.Int("partition", int(it.rec.Partition)),
		slog.Int64("offset", it.rec.Offset),
		slog.Int("payload_bytes", len(it.rec.Value)),
	}
	if it.p != nil {
		attrs = append(attrs, slog.String("routeId", it.p.RouteID))
		if it.p.TraceID != nil {
			attrs = append(attrs, slog.String("traceId", *it.p.TraceID))
		}
		if it.p.CorrelationID != nil {
			attrs = append(attrs, slog.String("correlationId", *it.p.CorrelationID))
		}
	}
	return attrs
}

// sleep waits d or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// backoff is capped exponential backoff with jitter: each wait is drawn
// from [cur/2, cur], and cur doubles up to max.
type backoff struct {
	min, max, cur time.Duration
}

func newBackoff(minD, maxD time.Duration) *backoff {
	return &backoff{min: minD, max: maxD, cur: minD}
}

func (b *backoff) next() time.Duration {
	d := b.cur
	b.cur = min(b.cur*2, b.max)
	half := d / 2
	if half <= 0 {
		return d
	}
	return half + rand.N(d-half+1)
}

func (b *backoff) reset() { b.cur = b.min }

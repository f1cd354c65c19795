// Package ingest moves every record of the input topic to exactly one place,
// the database or the dead-letter topic, and commits its offset only after
// it got there (contract §1.5).
//
// # Overview
//
// One goroutine, the poll loop in [Ingestor.Run], owns the Kafka consumer
// (only offset commits and the brokers' readiness probe run elsewhere): it
// polls, groups records into batches (up to Config.BatchSize records, fewer
// while writes outrun their time bound (batchcap.go), and
// Config.BatchBytes bytes; by default, Config.BatchMaxWait 0, whatever has
// arrived when a pipeline slot is free and the batch ahead has committed,
// so batches grow with the load and an idle record waits for nothing),
// hands each batch to a batch goroutine, takes the batch's result back, and
// commits. Rebalance callbacks run inside Poll on that same goroutine, so
// the loop's state never changes under a revocation; the Commit calls run on
// a goroutine of their own (commit.go), one at a time, and a revocation
// waits for the one running (at most the commit's bound, else its
// partitions' finished records are redelivered to their next owner).
//
// # Pipeline
//
// While it would wait in Poll, the loop parses pending records (parse.go),
// so that a batch waiting for its turn has its records parsed when it goes;
// a batch parses what the loop has not reached.
//
// At most two batches (Config.Pipeline) are in flight, each on its own
// database connection. A batch starts beside the one ahead only when it
// is full; one that is not full waits until the batch ahead has committed,
// for at most holdMax (Ingestor.held). A batch dead-letters the contract
// errors (concurrently with its database write) and writes the valid
// records in one transaction. The database sees each route's records in
// poll order:
//
//   - when batch N+1 shares a route with batch N, still writing, it runs
//     its statements only after N's statements finished (N then holds the
//     row locks of every route it touches, so N+1 queues behind N and the
//     later record wins), and commits only after N committed; if N failed,
//     N+1 rolls back and is redone after N was dealt with;
//   - when they share none, N+1 does not wait for N at all: both write and
//     commit at once, on two backends, and may share a WAL flush (N+1
//     notifies the relay after its commit, in a transaction of its own:
//     store.Passports.Write). Batches report to the poll loop in dispatch
//     order, so a slot frees only when every earlier batch is done: N+2
//     never meets an unfinished N.
//
// On this CPU-bound workload (jsonb parsing, index and foreign-key upkeep)
// the second backend matters most.
//
// A batch that waits for nothing sends its statements and its commit in
// one round trip; one that must commit after its predecessor sends BEGIN
// and its statements in one round trip and its COMMIT in a second, once
// the predecessor committed. An idle record thus
// costs one round trip and one WAL flush. A batch that is not full waits
// until the batch ahead has committed (Ingestor.held); a full one goes
// when a slot is free, so under a backlog two batches write at once.
//
// # Offsets
//
// A per-partition [tracker] remembers every polled offset and which are
// finished; the loop commits, per partition, up to the first unfinished one,
// so a later record finishing first never moves the commit past an earlier
// one. Commit runs on a goroutine of its own, one at a time, so a
// coordinator that does not answer never stalls polling; after a failure
// the next attempt waits (backoff from 1s to 10s). While records flow the
// loop commits at most once per Config.CommitInterval (100ms), not after
// every batch: each commit is a round trip to the coordinator, and at a
// steady rate the batches are small and many. On revocation and shutdown
// the loop commits at once and waits for the commit, at most
// Config.CommitTimeout.
//
// # Failure handling
//
// A batch whose transaction fails leaves the fast path and is written on its
// own, after its predecessor:
//
//   - database unavailable as a whole (store.KindUnavailable): the same
//     records are retried with capped exponential backoff and jitter; the
//     component "postgres" is reported not ready and the poll loop pauses
//     every assigned partition but keeps polling, so the group membership
//     survives; nothing is dead-lettered or committed. When a retry
//     succeeds, readiness returns and the partitions resume where they
//     stopped (polled records are kept in memory; none is skipped). A
//     successful ping does not end such an outage while a batch is still
//     retrying (the server may answer and refuse writes); a span that keeps
//     failing while pings succeed is split in halves. A write's statements
//     and its commit are each bounded by Config.DBTimeout
//     (INGEST_DB_TIMEOUT; a call carrying both gets twice it), and by
//     the server's statement_timeout if one is set; a timeout is never a
//     rejection, and an outage only when the server then fails a ping or
//     a lone record keeps timing out (a slow database is retried, not
//     paused for, and later batches are capped at what fitted,
//     batchcap.go; a write stuck behind a table lock or an idle
//     transaction is found by the probe, see probeDB, or, when a short
//     statement_timeout cuts it first, as that lone record). While the
//     database is down it is probed every 250ms (probeDB: one round
//     trip), and each successful probe ends the retries' backoff sleep,
//     so writing resumes within a tick of its return (at worst the rest
//     of a probe's wait, see probeTimeout); while it is up, a call
//     outstanding for a second triggers the same probe, whose failure
//     reports the outage before the call's own timeout (health.go).
//   - one record rejected (store.KindRecord): the batch is split in halves
//     until the rejected record is alone; it is retried Config.RecordRetries
//     times and then dead-lettered with category RETRYABLE; the other
//     records are written.
//   - a lost race with a concurrent transaction (store.KindConflict: a
//     serialization failure or a deadlock, after store.Passports.Write ran
//     the transaction again at read committed five times, six tries in
//     all): the same records are retried after a growing pause, without
//     pausing consumption, splitting or dead-lettering.
//
// A DLQ write that fails is retried the same way as an unavailable database
// (component "dlq", probed with a metadata request): the record's offset
// stays uncommitted meanwhile.
//
// Input brokers that do not answer need nothing from the loop (librdkafka
// reconnects, and the records wait in the topic); the component "kafka" is
// not ready while a metadata request a second gets no answer, or an answer
// without a usable input topic (brokers.go).
//
// # Rebalance and shutdown
//
// On revocation the loop drops the revoked partitions' unbatched records,
// waits (bounded) for their in-flight batches, commits what they finished,
// and forgets the partitions; a batch still retrying after that stops
// working on records it no longer owns. On shutdown it stops polling,
// waits (bounded) for in-flight batches, commits, and returns. Both waits
// end at one deadline once the stop is seen (ShutdownTimeout after it), so
// a revocation under way when the stop comes does not add its own.
package ingest

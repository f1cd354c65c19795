// Package relay publishes the transactional outbox (route_passport_outbox) to
// Kafka: claim due rows, publish them, mark them.
//
// # Overview
//
// A [Relay] runs a few workers (two by default). Each worker loops:
//
//  1. Claim: lease up to BatchSize due PENDING rows, oldest first, with
//     FOR UPDATE SKIP LOCKED and a fresh lease token, so that relays never
//     claim the same row while a lease holds. A claim also stops before its
//     payloads pass MaxClaimBytes (16 MiB stored by default; the first row
//     is always taken), so a run of large payloads cannot exhaust memory —
//     which would crash every relay on the same rows forever, since a crash
//     counts no attempt.
//  2. Publish: send the whole batch through one long-lived idempotent
//     producer, then wait for every delivery report (bounded by
//     PublishTimeout).
//  3. Mark: one statement marks the delivered rows PUBLISHED; one more
//     reschedules the failed ones with capped exponential backoff
//     ([Backoff]), or marks them FAILED at MaxAttempts. Both present the
//     lease token: a relay whose lease expired changes nothing.
//
// With two workers one worker's mark overlaps the other's publish, which
// keeps both PostgreSQL and the brokers busy.
//
// A worker claims again at once while claims come back full, and then
// wakes another worker to help; otherwise it sleeps until it is woken or the
// poll interval passes, whichever comes first. A NOTIFY on the outbox
// channel ([Relay.Notified]) wakes one worker, a sleeping one if any: one
// claim takes one transaction's rows. A reconnect or a resume
// ([Relay.Wake]) wakes them all.
//
// # Delivery and order
//
// Delivery is at least once: a row whose mark is lost (crash, lease expired
// during a long publish) is published again, with the same eventId header,
// and consumers de-duplicate on it. Rows are published oldest first within a
// batch, but batches of different workers and relays overlap, so there is
// no order across rows (each passport's two events go to different topics,
// and a passport's events are frozen once).
//
// A broker refuses a whole produce batch for one bad record (for example
// one over the topic's max.message.bytes). When a few rows of a batch fail
// with errors about the message, each is sent once more on its own, so that
// only the offender is charged an attempt. (Rows of two batches in flight at
// once, from two workers, can still share a produce batch: then the
// innocent row is charged one attempt and goes through on its retry.)
//
// # Kafka outages do not burn attempts
//
// Only errors that are the message's fault count an attempt: too large, not
// authorised, invalid or unknown topic (a missing topic makes the rows
// FAILED and visible instead of retried unseen), corrupt record, and errors
// no class below claims.
//
// An error that says the cluster could not take the message
// ([record.ErrUnavailable]: unreachable brokers, timeouts, a partition without a
// leader, not enough in-sync replicas) never counts. The relay probes the
// cluster: if no broker answers, it gives the leases back, reports "kafka"
// not ready, stops claiming, and probes with capped backoff until a broker
// answers. If a broker does answer (a partial outage: one broker down, an
// election, too few replicas), it postpones the rows, each by the delay of
// its current attempt count (which a postpone leaves as it is, so the delay
// does not grow), recording last_error but not counting an attempt
// (route_passport_outbox_postponed_total).
//
// Messages the producer never submitted to the cluster ([record.ErrNotAttempted]:
// the client was reset after a fatal error, closed, or purged its queues;
// the relay is stopping) are given back at once. While stopping, the relay
// starts no probe of its own (a metadata request ignores cancellation) and
// gives unavailable rows back too; a batch still in its shutdown grace is
// stall-probed as before.
//
// A row whose stored headers are not a JSON object of strings is not sent;
// the decode error counts an attempt against that row alone.
//
// A batch whose delivery reports have not come after 1.5s (a broker that
// stops answering without resetting its connections: a blackhole, a frozen
// process) makes the relay probe at once rather than after PublishTimeout:
// when no broker answers, "kafka" is not ready and claims stop while the
// batch waits out its timeout and gives its leases back. An idle relay
// (nothing delivered for a second) probes every second, so it reports an outage too.
//
// Probes repeat with a backoff capped at ProbeMaxBackoff (500ms): cheap, so
// the relay is claiming again within about a second of the cluster's
// return.
//
// # Database outages and hung links
//
// Every database call is bounded: reads and retention deletes by DBTimeout
// (3s), claims by what the lease leaves room for (claimCall: 20s with the
// defaults), marks and the other writes by their rows' lease (writeCall). A
// claim or write outstanding for DBTimeout/2 (at most a second) is probed,
// and again as often while it runs (watchCall): a database that does not
// answer, or a call stuck behind someone's table lock or idle transaction,
// turns "postgres" not ready within seconds, while a call that is merely slow
// (a held snapshot, a loaded machine) runs on. While PostgreSQL cannot be
// reached the relay retries the claim with backoff capped at ProbeMaxBackoff.
// No database error counts an attempt against a row: a read-only server
// (25006, an old primary back as a standby), an administrator shutdown
// (57P01) and lost connections (08xxx) are outages like any other.
//
// # Wake-up mode
//
// Workers sleep until [Relay.Notified] (a NOTIFY) or the poll interval.
// Behind a transaction pooler LISTEN hears nothing. The relay notices it
// by a probe after each (re)connect of the listener ([Relay.Connected]: a
// notification sent through the pool that does not come back within 3 s),
// or by rows that a poll finds and no notification announced (none within
// 3 s of the claim either: the ingestor notifies just after its commit), and
// reports route_passport_outbox_relay_wakeup_mode{mode="poll"}, logging the
// change once; the next notification switches it back to "notify".
//
// # Traces
//
// With Config.Tracer set, each claim is a span, and each published row a
// producer span that is the child of the row's stored traceparent (when it
// has one) and links to its claim; the published record's traceparent is
// then the publish span's, so consumers continue the passport's trace.
//
// # Leases
//
// LockTimeout must exceed PublishTimeout, and should by [LeaseMargin] (the
// producer's 5s report hand-off and 5s for the marks). The one-by-one
// re-send after message errors starts no send later than
// LockTimeout − PublishTimeout − LeaseMargin after the claim, so its marks
// still land within the lease; rows it cannot re-send in time are charged.
//
// # Pause
//
// The claim reads outbox_relay_control itself, so `outbox-relay pause` stops
// every relay's next claim; batches in flight finish. Paused is an intended
// state, not a broken one: /readyz stays 200 and the
// route_passport_outbox_paused gauge is 1.
package relay

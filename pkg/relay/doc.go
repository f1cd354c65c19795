// Package relay publishes the transactional outbox (route_passport_outbox) to
// Kafka: claim due rows, publish them, mark them.
//
// # Overview
//
// A [Relay] runs a few workers (two by default). Each worker loops:
//
//  1. Claim: lease up to BatchSize due PENDING rows, oldest first, with
//     FOR UPDATE SKIP LOCKED and a fresh lease token, so that relays never
//     claim the same row while a lease holds.
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
// A worker claims again at once while claims come back full; otherwise it
// sleeps until a NOTIFY on the outbox channel ([Relay.Wake]) or the poll
// interval, whichever comes first.
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
// An error that says the cluster could not be reached ([ErrUnavailable]) is
// confirmed with a probe. If no broker answers, the relay gives the leases
// back without counting an attempt, reports "kafka" not ready, stops
// claiming, and probes with capped backoff until a broker answers. If a
// broker does answer, the error was about the message after all and counts.
// Errors about the message itself (too large, not authorised, invalid topic)
// always count. While PostgreSQL cannot be reached the relay reports
// "postgres" not ready and retries with capped backoff.
//
// # Pause
//
// The claim reads outbox_relay_control itself, so `outbox-relay pause` stops
// every relay's next claim; batches in flight finish. Paused is an intended
// state, not a broken one: /readyz stays 200 and the
// route_passport_outbox_paused gauge is 1.
package relay

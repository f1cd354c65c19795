// Package dlqreplay re-publishes dead-lettered records to the input topic
// once an operator has fixed what made them fail: `ingestor dlq-replay`.
//
// # Overview
//
// The ingestor copies a record it cannot process to the DLQ topic with the
// original key, value and headers, plus Spring Kafka's kafka_dlt-* headers
// and pcp-error-category / pcp-error-field (contract §4). A replay reads
// the DLQ, selects records by DLQ partition, DLQ offset range, DLQ
// timestamp, error category and error field, and produces each selected one
// to the input topic with the original key, value and headers: every
// kafka_dlt-* and pcp-error-* header is dropped, nothing is added. The
// ingestor then processes it like any other record; it is idempotent (an
// upsert by routeId), so replaying a record twice is harmless.
//
// The DLQ is read without a consumer group (partitions are assigned and
// nothing is committed), so a replay never rebalances or moves the
// ingestor's group, and several replays may run at once. Reading stops at
// the high watermarks captured when the run starts, so a replay ends even
// when the records it sends fail again and come back to the DLQ. Records
// are sent through the idempotent acks=all producer, in DLQ order, in
// batches whose delivery reports are all awaited; the run stops after the
// first batch with a failed delivery.
//
// # Usage (runbook)
//
// Settings come from the ingestor's environment: KAFKA_BOOTSTRAP_SERVERS
// (required), KAFKA_PROPERTY_* (TLS, SASL ...), TOPIC_INPUT, TOPIC_INPUT_DLQ,
// TOPIC_PROCESSED_ROUTE and TOPIC_ROUTE_GEOREFERENCE (refused as --to),
// LOG_FORMAT, LOG_LEVEL. DATABASE_URL is not needed.
//
//	ingestor dlq-replay [--partition N[,N...]] [--from-offset N] [--to-offset N]
//	                    [--since TIME] [--until TIME] [--category C]
//	                    [--field-prefix P] [--to TOPIC] [--dry-run]
//
// The flags:
//
//   - --partition, --from-offset, --to-offset: DLQ partitions and DLQ
//     offsets (both offsets inclusive, applied to every partition read), as
//     a dry run lists them; default all partitions, whole log.
//   - --since, --until: RFC 3339 times compared with the DLQ record's
//     timestamp, i.e. when the record was dead-lettered (not
//     kafka_dlt-original-timestamp, which the dry run shows as
//     original_time); since inclusive, until exclusive. --since seeks with
//     the broker's time index instead of scanning.
//   - --category CONTRACT|RETRYABLE|FATAL: the pcp-error-category header.
//   - --field-prefix P: the pcp-error-field header starts with P.
//   - --to TOPIC: target topic instead of TOPIC_INPUT; never the DLQ
//     itself nor an output topic (TOPIC_PROCESSED_ROUTE,
//     TOPIC_ROUTE_GEOREFERENCE), where consumers expect events.
//   - --dry-run: list the selected records and send nothing.
//
// All given conditions must hold. Every selected record gets one line on
// standard output (would-replay, replayed or failed; cannot-replay for one
// dead-lettered without its value) with its DLQ partition, offset and time,
// original topic/partition/offset/time, category, field, exception message,
// key and value size (never the value), then, when the run completed, a
// summary:
//
//	dlq-replay: dry_run=false selected=3 replayed=3 skipped=7 failed=0 scanned=10
//
// skipped counts records read but not selected; " omitted=N" is added when
// records could not be replayed for want of their value (or key and
// headers). A run stopped by an
// error after it read records prints the same counts after
// "dlq-replay: INCOMPLETE, stopped by an error:" instead. Exit status: 0 when
// every selected record that can be replayed was acknowledged (omitted
// records cannot be, and a rerun would not change that: they are counted
// and warned of, not an error), 1 when a delivery failed or the DLQ
// could not be read (the failed lines name the records; rerun with
// --from-offset to resume), 2 on a bad flag or setting.
//
// A typical session, after raising INGEST_MAX_VALUE_BYTES:
//
//	ingestor dlq-replay --category CONTRACT --since 2026-04-28T00:00:00Z --dry-run
//	ingestor dlq-replay --category CONTRACT --since 2026-04-28T00:00:00Z
//
// A record sent back to the topic it came from goes to its original
// partition when the topic has it (read in order with its key's other
// records); any other where the producer's partitioner puts it. Replayed
// records that fail again are dead-lettered again, as new DLQ records with
// new offsets.
package dlqreplay

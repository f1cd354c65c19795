// Package e2e holds the resilience suite: the two binaries run as real child
// processes against a PostgreSQL cluster and a Kafka broker of their own, and
// the tests kill, stop and freeze them while traffic flows, then check the
// guarantees of docs/contract.md from outside: nothing lost, nothing
// dead-lettered that was valid, everything published, duplicates bounded.
//
// # Overview
//
//   - harness.go (the only non-test code, shared with scripts/bench and
//     scripts/soak through scripts/internal/rig) builds cmd/ingestor and
//     cmd/outbox-relay into a temporary directory once per top-level test
//     (normal builds, even under -race: only the test binary is
//     instrumented) and runs them as a [Proc]: started with an explicit
//     environment (no variable of the test's own environment leaks in),
//     logging JSON to a file per process that is printed when a test fails,
//     with Kill9, Stop (SIGTERM), Restart and a wait for /readyz; and an
//     input [Producer] that remembers where each record landed.
//   - stack_test.go gives each test its own PostgreSQL cluster
//     (testenv.NewPostgresCluster), migrated by `ingestor migrate`, its own
//     broker process (testenv.NewBrokerProcess), its own topics and consumer
//     group, and the checks that read the database and the output topics.
//   - resilience_test.go (TestResilience): crash loop, database restart,
//     broker outage, hostile input, and a killed ingestor's partitions taken
//     over by a second one.
//   - prod_test.go and prodenv_test.go (TestProduction): production
//     conditions — PgBouncer in transaction mode, a failover to a promoted
//     standby, Toxiproxy latency, resets and blackholes on the links to
//     PostgreSQL and Kafka, and recovery after an outage and a frozen broker.
//   - trace_test.go: a traceparent followed through both binaries to an
//     OTLP collector.
//
// The suite needs the PostgreSQL server binaries, a Go toolchain and a C
// compiler (the binaries use librdkafka through cgo). Missing infrastructure
// fails the tests; nothing is skipped.
package e2e

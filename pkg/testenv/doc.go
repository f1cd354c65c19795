// Package testenv is the one piece of test infrastructure that every
// integration test uses: real PostgreSQL and a real Kafka protocol
// implementation, never mocks, started once per test binary and shared, with
// cheap per-test isolation on top.
//
// # Overview
//
//	func TestMain(m *testing.M) { testenv.Main(m) }
//
//	func TestSomething(t *testing.T) {
//		t.Parallel()
//		pool := testenv.Pool(t)                    // a migrated database of this test's own
//		bootstrap := testenv.KafkaBootstrap(t)     // "127.0.0.1:port"
//		topic := testenv.Topic(t, "passports", 3)  // a topic of this test's own
//		...
//	}
//
// Everything starts lazily on first use, so a package that only needs Kafka
// never starts PostgreSQL, and is stopped and removed by [Main] after the
// tests, passed or failed.
//
// # Where PostgreSQL and Kafka come from
//
// Each is chosen on its own, first match wins:
//
//  1. TEST_DATABASE_URL / TEST_KAFKA_BOOTSTRAP_SERVERS: an existing server,
//     as in CI with service containers. The database role must be allowed to
//     CREATE DATABASE; the URL's database is only used for maintenance.
//  2. Docker, when a daemon answers a ping (dockertest): postgres:15 and a
//     single-node KRaft apache/kafka advertising 127.0.0.1 and the host port.
//     Set TESTENV_NO_DOCKER=1 to skip this step.
//  3. Local: a throwaway cluster from the PostgreSQL server binaries (initdb
//     and pg_ctl on PATH, under /usr/lib/postgresql/*/bin or
//     /usr/pgsql-*/bin), and kfake, the Kafka broker of franz-go, in process.
//
// Without any PostgreSQL, tests fail (never skip) and say how to provide one.
//
// # Databases
//
// A template database is created and migrated with store.MigrateURL once per
// binary. [DatabaseURL] and [Pool] hand every test a new database cloned from
// it (CREATE DATABASE ... TEMPLATE, a file copy: tens of milliseconds, far
// cheaper than migrating) and drop it WITH (FORCE) at the test's cleanup.
// Tests may therefore commit, run in parallel and leave rows behind.
// [EmptyDatabaseURL] gives an unmigrated database for migration tests.
//
// The local cluster runs as the postgres user when the tests run as root
// (PostgreSQL refuses root; `runuser -u postgres --`), in a temporary
// directory, on 127.0.0.1 and a free port, with its unix socket in that
// directory, and with settings for speed: fsync, synchronous_commit and
// full_page_writes off, max_connections 300, shared_buffers 128MB. initdb
// runs once per binary; later clusters copy its output.
//
// [NewPostgresCluster] gives a test a cluster of its own that it may Stop and
// Start (same data, same port) without disturbing others; PostgresOptions.Fsync
// turns durability back on for benchmarks.
//
// # Kafka
//
// [KafkaBootstrap] is the shared broker, [Topic] a topic of the test's own
// (created through the admin API, so it works the same on kfake and Kafka).
// [KafkaWithoutAutoCreate] is a broker of the test's own that creates no
// topic on demand, for tests whose premise is a missing topic.
// [Produce], [Consume], [ReadAll] and [CommittedOffsets] are franz-go helpers
// for assertions; the service itself talks to Kafka through
// confluent-kafka-go (pkg/kafkax).
//
// The in-process kfake cluster has one broker (leader of every partition and
// coordinator of every group, so clients only ever dial the bootstrap
// address), auto-creates topics with [DefaultPartitions] partitions, and
// listens on, and advertises, 127.0.0.1:port — the address clients dial.
//
// librdkafka (confluent-kafka-go v2.11) works against kfake with no special
// option: TestConfluentClientsOnSharedBroker produces with
// enable.idempotence=true and acks=all (InitProducerId, idempotent
// sequences), compressed as pkg/kafkax's producers compress, with
// headers, consumes in a consumer group (classic protocol: JoinGroup,
// SyncGroup, LeaveGroup on Close) with manual CommitOffsets, and reads the
// commits back with kadm. kfake also answers librdkafka's KIP-714
// telemetry requests, which is why librdkafka logs a "Telemetry client
// instance id changed" line at info level.
//
// [NewBrokerProcess] runs scripts/devbroker (kfake in a child process, built
// once per binary) for tests that freeze the broker: Pause is SIGSTOP (open
// connections stay, nothing answers, data is kept), Resume is SIGCONT. Note
// that an idempotent producer cannot give up on a batch already in flight to
// a frozen broker, whatever its context says; it waits for the broker.
//
// # Child processes
//
// [StartProcess] is the one process helper: a child in a process group of
// its own (a Ctrl-C reaches it only through its parent's orderly stop),
// registered with the reaper, with its output sent to a file or a writer,
// [Process.WaitHTTP] for a /readyz, and [Process.Stop] (SIGTERM to the group,
// SIGKILL after a grace, always reaped). pkg/e2e's Proc, dlqreplay's
// integration test, the dev broker, `make run` (scripts/devrun) and `make
// bench` run their children on it; [GoBuild] builds them.
//
// The mains' own tests (cmd/ingestor, cmd/outbox-relay) call run in process
// instead: [StartMain] runs it on a goroutine, and [MainRun.Stop] cancels
// its context as SIGTERM would and fails the test unless run returns within
// the contract's 30 s.
//
// A program (not a test binary) calls [Open] instead of Main and defers the
// function it returns; [StartPostgresCluster] and [StartBrokerProcess] are
// NewPostgresCluster and NewBrokerProcess without a testing.TB.
//
// # Production conditions
//
// For tests of what stands between a service and its dependencies:
// [NewPgBouncer] runs the real PgBouncer (Debian package pgbouncer) in
// front of a [PostgresCluster] in transaction pooling mode, its URL carrying
// pgx's default_query_exec_mode=exec. [NewReplicatedCluster] is a primary
// with a synchronous streaming standby (pg_basebackup -R,
// synchronous_standby_names = '*'), a multi-host URL with
// target_session_attrs=read-write, KillPrimary (pg_ctl stop -m immediate),
// Promote, and RestartPrimaryReadOnly (writes fail with SQLSTATE 25006).
// [NewFaultProxy] is a Toxiproxy proxy embedded in the test binary with
// Latency, ResetPeer and Blackhole (the timeout toxic with timeout 0: bytes
// held, no RST), each switched off again with Heal or Clear.
// [NewProxiedKafka] is a kfake broker that advertises its proxy's address
// (kfake.ListenFn), so every client, the test's own too, goes through the
// proxy. PgBouncer runs in a process group of its own, registered with the
// reaper like the clusters; proxies and kfake live in the test process.
//
// # Cleanup when the test binary dies
//
// Main's teardown does not run when a test panics (the testing package
// re-panics on the test's goroutine), on `go test -timeout`, or on SIGKILL, and
// pg_ctl detaches the postmaster into a session of its own, so the cluster
// would outlive the binary. Hence the reaper: the test binary re-executed as a
// small child (its own process group, no inherited output), reading from a
// pipe whose write end only the test binary holds. Whatever ends the test
// binary, the kernel closes that end; the reaper reads EOF and undoes what is
// still registered: `pg_ctl stop -m immediate` and removal of the cluster's
// directory, SIGKILL of broker process groups (SIGCONT first, for paused
// ones), removal of Docker containers, removal of temporary directories.
// TestCleanupAfterCrash checks this for a panic and for SIGKILL. With
// TEST_DATABASE_URL, databases of a killed binary stay on that server (named
// testenv_*); drop them by hand.
package testenv

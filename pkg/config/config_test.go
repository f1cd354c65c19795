package config

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pcp/route-processing/pkg/relay"
)

var required = []string{"DATABASE_URL=postgres://u:secret@localhost/db", "KAFKA_BOOTSTRAP_SERVERS=localhost:9092"}

func env(extra ...string) []string { return append(append([]string{}, required...), extra...) }

func TestDefaults(t *testing.T) {
	t.Parallel()
	ing, err := LoadIngestor(env())
	require.NoError(t, err)
	require.Equal(t, "pcp-route-processing-service", ing.ConsumerGroup)
	require.Equal(t, "pcp.request.survey-georeference.v1", ing.TopicInput)
	require.Equal(t, "pcp.request.survey-georeference-dlq.v1", ing.TopicInputDLQ)
	require.Equal(t, "pcp.route.in.v1", ing.TopicProcessedRoute)
	require.Equal(t, "pcp.route.georeference.v1", ing.TopicRouteGeoreference)
	require.Equal(t, ":8080", ing.HTTPAddr)
	require.Equal(t, "json", ing.LogFormat)
	require.Equal(t, slog.LevelInfo, ing.LogLevel)
	c, err := LoadIngestor(env("LOG_FORMAT=JSON", "OUTBOX_MESSAGE_KEY=ROUTEID"))
	require.NoError(t, err)
	require.Equal(t, "json", c.LogFormat)
	require.Equal(t, "routeId", c.MessageKey, "any letter case, kept as the contract spells it")
	for in, want := range map[string]slog.Level{"debug": slog.LevelDebug, "WARN": slog.LevelWarn, "warning": slog.LevelWarn, "Warning": slog.LevelWarn, "error": slog.LevelError, "INFO+2": slog.LevelInfo + 2} {
		c, err := LoadIngestor(env("LOG_LEVEL=" + in))
		require.NoError(t, err, "LOG_LEVEL=%s", in)
		require.Equal(t, want, c.LogLevel, "LOG_LEVEL=%s", in)
	}
	for _, gogc := range []string{"off", "0", "300"} {
		_, err := LoadIngestor(env("GOGC=" + gogc))
		require.NoError(t, err, "GOGC=%s", gogc)
	}
	require.False(t, ing.LogForceColor)
	forced, err := LoadIngestor(env("FORCE_COLOR=1"))
	require.NoError(t, err)
	require.True(t, forced.LogForceColor, "FORCE_COLOR colours text logs into a pipe (make run)")
	mig, err := LoadMigrate([]string{"DATABASE_URL=postgres://u@localhost/db", "FORCE_COLOR=1"})
	require.NoError(t, err)
	require.True(t, mig.LogForceColor)
	// The database-only commands (migrate, the relay's ops) check GOGC too.
	_, err = LoadMigrate([]string{"DATABASE_URL=postgres://u@localhost/db", "GOGC=fast"})
	require.ErrorContains(t, err, "GOGC")
	require.Equal(t, "traceId", ing.MessageKey)
	require.Equal(t, 500, ing.Ingest.BatchSize)
	require.Equal(t, time.Duration(0), ing.Ingest.BatchMaxWait, "natural batching")
	require.Equal(t, 1<<20, ing.Ingest.Limits.MaxValueBytes)
	require.Equal(t, 100_000, ing.Ingest.Limits.MaxPositions)
	require.Equal(t, 3, ing.Ingest.RecordRetries)
	require.Equal(t, 30*time.Second, ing.Ingest.MaxBackoff)
	require.Equal(t, "pcp-route-processing-service", ing.Ingest.ConsumerGroup)
	require.Equal(t, "pcp.request.survey-georeference-dlq.v1", ing.Ingest.DLQTopic)
	require.Equal(t, "pcp.route.in.v1", ing.Ingest.Events.TopicProcessedRoute)

	rel, err := LoadRelay(env())
	require.NoError(t, err)
	require.Equal(t, 10, rel.MaxAttempts)
	require.Equal(t, time.Second, rel.InitialBackoff)
	require.Equal(t, 60*time.Second, rel.MaxBackoff)
	require.Equal(t, 60*time.Second, rel.LockTimeout)
	require.Equal(t, 500, rel.BatchSize)
	require.Equal(t, time.Second, rel.PollInterval)
	require.Equal(t, 30*time.Second, rel.PublishTimeout)
	require.Equal(t, 24*time.Hour, rel.Retention)
	require.Equal(t, 10*time.Second, rel.RetentionInterval)
	require.Equal(t, 5000, rel.RetentionBatch)
	require.Equal(t, 10*time.Second, rel.ClaimFullScanInterval)
	require.Equal(t, 10*time.Second, rel.ClaimWatermarkMargin)
}

func TestErrorsNameTheVariable(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		environ []string
		relay   bool
		wantVar string
	}{
		{"missing database url", []string{"KAFKA_BOOTSTRAP_SERVERS=x:1"}, false, "DATABASE_URL"},
		{"empty database url", []string{"DATABASE_URL=", "KAFKA_BOOTSTRAP_SERVERS=x:1"}, true, "DATABASE_URL"},
		{"missing bootstrap", []string{"DATABASE_URL=postgres://x"}, true, "KAFKA_BOOTSTRAP_SERVERS"},
		{"bad max backoff", env("OUTBOX_MAX_BACKOFF=soon"), true, "OUTBOX_MAX_BACKOFF"},
		{"negative backoff", env("OUTBOX_INITIAL_BACKOFF=-1s"), true, "OUTBOX_INITIAL_BACKOFF"},
		{"max below initial", env("OUTBOX_INITIAL_BACKOFF=10s", "OUTBOX_MAX_BACKOFF=1s"), true, "OUTBOX_MAX_BACKOFF"},
		{"attempts not int", env("OUTBOX_MAX_ATTEMPTS=ten"), true, "OUTBOX_MAX_ATTEMPTS"},
		{"attempts zero", env("OUTBOX_MAX_ATTEMPTS=0"), true, "OUTBOX_MAX_ATTEMPTS"},
		{"lease shorter than explicit publish timeout", env("OUTBOX_LOCK_TIMEOUT=5s", "OUTBOX_PUBLISH_TIMEOUT=10s"), true, "OUTBOX_LOCK_TIMEOUT"},
		{"log format", env("LOG_FORMAT=xml"), false, "LOG_FORMAT"},
		{"log level", env("LOG_LEVEL=loud"), false, "LOG_LEVEL"},
		{"message key", env("OUTBOX_MESSAGE_KEY=id"), false, "OUTBOX_MESSAGE_KEY"},
		{"batch size", env("INGEST_BATCH_SIZE=0"), false, "INGEST_BATCH_SIZE"},
		{"batch wait", env("INGEST_BATCH_MAX_WAIT=fast"), false, "INGEST_BATCH_MAX_WAIT"},
		{"negative batch wait", env("INGEST_BATCH_MAX_WAIT=-1ms"), false, "INGEST_BATCH_MAX_WAIT"},
		{"positions below the minimum", env("INGEST_MAX_POSITIONS=3"), false, "INGEST_MAX_POSITIONS"},
		{"retries not int", env("INGEST_RECORD_RETRIES=x"), false, "INGEST_RECORD_RETRIES"},
		{"zero ingest backoff", env("INGEST_MAX_BACKOFF=0s"), false, "INGEST_MAX_BACKOFF"},
		{"negative db timeout", env("INGEST_DB_TIMEOUT=-1s"), false, "INGEST_DB_TIMEOUT"},
		{"db timeout of a millisecond", env("INGEST_DB_TIMEOUT=1ms"), false, "INGEST_DB_TIMEOUT"},
		{"backoff of a nanosecond", env("INGEST_MAX_BACKOFF=1ns"), false, "INGEST_MAX_BACKOFF"},
		{"negative commit interval", env("INGEST_COMMIT_INTERVAL=-1ms"), false, "INGEST_COMMIT_INTERVAL"},
		{"commit interval over a minute", env("INGEST_COMMIT_INTERVAL=2m"), false, "INGEST_COMMIT_INTERVAL"},
		{"commit interval without a unit", env("INGEST_COMMIT_INTERVAL=100"), false, "INGEST_COMMIT_INTERVAL"},
		{"topic with a space", env("TOPIC_INPUT=my topic"), false, "TOPIC_INPUT"},
		{"topic with a slash", env("TOPIC_INPUT_DLQ=a/b"), true, "TOPIC_INPUT_DLQ"},
		{"topic too long", env("TOPIC_PROCESSED_ROUTE=" + strings.Repeat("t", 250)), true, "TOPIC_PROCESSED_ROUTE"},
		{"topic dot", env("TOPIC_ROUTE_GEOREFERENCE=."), false, "TOPIC_ROUTE_GEOREFERENCE"},
		{"dead letters into the input", env("TOPIC_INPUT=in", "TOPIC_INPUT_DLQ=in"), false, "TOPIC_INPUT_DLQ"},
		{"output into the input", env("TOPIC_INPUT=in", "TOPIC_ROUTE_GEOREFERENCE=in"), true, "TOPIC_ROUTE_GEOREFERENCE"},
		{"output into the dead letters", env("TOPIC_INPUT_DLQ=dlq", "TOPIC_PROCESSED_ROUTE=dlq"), false, "TOPIC_PROCESSED_ROUTE"},
		{"bootstrap only commas", []string{"DATABASE_URL=postgres://x", "KAFKA_BOOTSTRAP_SERVERS=,"}, false, "KAFKA_BOOTSTRAP_SERVERS"},
		{"bootstrap port out of range", []string{"DATABASE_URL=postgres://x", "KAFKA_BOOTSTRAP_SERVERS=b:1,127.0.0.1:99999"}, true, "KAFKA_BOOTSTRAP_SERVERS"},
		{"bootstrap port not a number", []string{"DATABASE_URL=postgres://x", "KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:abc"}, false, "KAFKA_BOOTSTRAP_SERVERS"},
		{"bootstrap bare ipv6", []string{"DATABASE_URL=postgres://x", "KAFKA_BOOTSTRAP_SERVERS=::1:9092"}, false, "KAFKA_BOOTSTRAP_SERVERS"},
		{"GOGC not a number", []string{"DATABASE_URL=postgres://x", "KAFKA_BOOTSTRAP_SERVERS=b", "GOGC=abc"}, false, "GOGC"},
		{"GOGC negative", []string{"DATABASE_URL=postgres://x", "KAFKA_BOOTSTRAP_SERVERS=b", "GOGC=-5"}, true, "GOGC"},
		{"bootstrap unknown protocol", []string{"DATABASE_URL=postgres://x", "KAFKA_BOOTSTRAP_SERVERS=http://b:9092"}, false, "KAFKA_BOOTSTRAP_SERVERS"},
		{"bootstrap host with a space", []string{"DATABASE_URL=postgres://x", "KAFKA_BOOTSTRAP_SERVERS=host with space:9092"}, false, "KAFKA_BOOTSTRAP_SERVERS"},
		{"bootstrap host with a space, no port", []string{"DATABASE_URL=postgres://x", "KAFKA_BOOTSTRAP_SERVERS=b, host with space"}, false, "KAFKA_BOOTSTRAP_SERVERS"},
		{"bootstrap protocol not security.protocol", []string{"DATABASE_URL=postgres://x", "KAFKA_BOOTSTRAP_SERVERS=SASL_SSL://b:9093"}, false, "KAFKA_BOOTSTRAP_SERVERS"},
		{"bootstrap protocol not the producer's security.protocol", []string{"DATABASE_URL=postgres://x", "KAFKA_BOOTSTRAP_SERVERS=ssl://b:9093", "KAFKA_CONSUMER_PROPERTY_SECURITY_PROTOCOL=ssl"}, true, "KAFKA_BOOTSTRAP_SERVERS"},
		{"bootstrap empty DNS label", []string{"DATABASE_URL=postgres://x", "KAFKA_BOOTSTRAP_SERVERS=a..b:9092"}, false, "KAFKA_BOOTSTRAP_SERVERS"},
		{"bootstrap label starting with a dash", []string{"DATABASE_URL=postgres://x", "KAFKA_BOOTSTRAP_SERVERS=-b:9092"}, false, "KAFKA_BOOTSTRAP_SERVERS"},
		{"GOGC beyond 32 bits", []string{"DATABASE_URL=postgres://x", "KAFKA_BOOTSTRAP_SERVERS=b", "GOGC=3000000000"}, false, "GOGC"},
		{"blank consumer group", env("KAFKA_CONSUMER_GROUP=  "), false, "KAFKA_CONSUMER_GROUP"},
		{"http addr without port", env("HTTP_ADDR=bad"), true, "HTTP_ADDR"},
		{"http port out of range", env("HTTP_ADDR=:99999"), false, "HTTP_ADDR"},
		{"sub-millisecond publish timeout", env("OUTBOX_PUBLISH_TIMEOUT=500us"), true, "OUTBOX_PUBLISH_TIMEOUT"},
		{"publish timeout past librdkafka's range", env("OUTBOX_PUBLISH_TIMEOUT=1000h", "OUTBOX_LOCK_TIMEOUT=2000h"), true, "OUTBOX_PUBLISH_TIMEOUT"},
		{"lease of a nanosecond", env("OUTBOX_LOCK_TIMEOUT=1ns"), true, "OUTBOX_LOCK_TIMEOUT"},
		{"retention shorter than the lease", env("OUTBOX_RETENTION=30s"), true, "OUTBOX_RETENTION"},
		{"batch size zero", env("OUTBOX_BATCH_SIZE=0"), true, "OUTBOX_BATCH_SIZE"},
		{"retention every nanosecond", env("OUTBOX_RETENTION_INTERVAL=1ns"), true, "OUTBOX_RETENTION_INTERVAL"},
		{"stats every millisecond", env("OUTBOX_STATS_INTERVAL=1ms"), true, "OUTBOX_STATS_INTERVAL"},
		{"stats never", env("OUTBOX_STATS_INTERVAL=0"), true, "OUTBOX_STATS_INTERVAL"},
		{"poll every microsecond", env("OUTBOX_POLL_INTERVAL=1us"), true, "OUTBOX_POLL_INTERVAL"},
		{"reindex check every millisecond", env("OUTBOX_REINDEX_INTERVAL=1ms"), true, "OUTBOX_REINDEX_INTERVAL"},
		{"claim watermark rescanned every millisecond", env("OUTBOX_CLAIM_FULL_SCAN_INTERVAL=1ms"), true, "OUTBOX_CLAIM_FULL_SCAN_INTERVAL"},
		{"database bound of a nanosecond", env("OUTBOX_DB_TIMEOUT=1ns"), true, "OUTBOX_DB_TIMEOUT"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var err error
			if tc.relay {
				_, err = LoadRelay(tc.environ)
			} else {
				_, err = LoadIngestor(tc.environ)
			}
			var cfgErr *Error
			require.True(t, errors.As(err, &cfgErr), "want *config.Error, got %v", err)
			require.Equal(t, tc.wantVar, cfgErr.Var)
			require.Contains(t, err.Error(), tc.wantVar)
			require.NotContains(t, err.Error(), "secret", "the error must not echo the database password")
		})
	}
}

// TestReasonsNameVariablesNotFields: a rule that relates two settings
// names both by their variables, and a bound is the one the rule applies.
func TestReasonsNameVariablesNotFields(t *testing.T) {
	t.Parallel()
	_, err := LoadRelay(env("OUTBOX_INITIAL_BACKOFF=1h"))
	require.ErrorContains(t, err, "OUTBOX_INITIAL_BACKOFF")
	require.ErrorContains(t, err, "OUTBOX_MAX_BACKOFF")
	require.NotContains(t, err.Error(), "InitialBackoff")

	_, err = LoadRelay(env("OUTBOX_MAX_ATTEMPTS=0"))
	require.ErrorContains(t, err, "0 is outside [1, 1000000]")
	// The ingestor reads the same variable: the same words.
	_, ierr := LoadIngestor(env("OUTBOX_MAX_ATTEMPTS=0"))
	require.Equal(t, err.Error(), ierr.Error())
	_, err = LoadRelay(env("OUTBOX_RETENTION=-1h"))
	require.ErrorContains(t, err, "OUTBOX_RETENTION: -1h is negative (0 turns it off)")
	require.NotContains(t, err.Error(), "2147483647")
	_, err = LoadRelay(env("OUTBOX_MAX_ATTEMPTS=1000001"))
	require.ErrorContains(t, err, "OUTBOX_MAX_ATTEMPTS")
	require.ErrorContains(t, err, "1000000]")
}

// TestAcceptedEdgeValues: forms that must keep working.
func TestAcceptedEdgeValues(t *testing.T) {
	t.Parallel()
	for _, bootstrap := range []string{"b:9092", "b", "b1:9092, b2:9092", "SASL_SSL://b:9093", "sasl_ssl://b", "[::1]:9092", "[::1]", "[fe80::1%eth0]:9092", "10.0.0.1:1", "kafka-0.kafka_headless.ns.svc:9092", "Kafka.Example.COM.:9092"} {
		// A protocol prefix must be security.protocol's: set here for all.
		_, err := LoadIngestor([]string{"DATABASE_URL=postgres://x", "KAFKA_PROPERTY_SECURITY_PROTOCOL=SASL_SSL", "KAFKA_BOOTSTRAP_SERVERS=" + bootstrap})
		require.NoError(t, err, bootstrap)
	}
	_, err := LoadIngestor([]string{"DATABASE_URL=postgres://x", "KAFKA_BOOTSTRAP_SERVERS=PLAINTEXT://b:9092"})
	require.NoError(t, err, "plaintext is librdkafka's default security.protocol")

	for _, addr := range []string{":8080", "127.0.0.1:0", "[::]:9000", "localhost:8080"} {
		_, err := LoadRelay(env("HTTP_ADDR=" + addr))
		require.NoError(t, err, addr)
	}
	c, err := LoadIngestor(env("TOPIC_INPUT=a.b_c-D9", "TOPIC_PROCESSED_ROUTE=out", "TOPIC_ROUTE_GEOREFERENCE=out"))
	require.NoError(t, err, "both outputs on one topic")
	require.Equal(t, "a.b_c-D9", c.TopicInput)
	r, err := LoadRelay(env("DATABASE_LISTEN_URL=  "))
	require.NoError(t, err)
	require.Equal(t, r.DatabaseURL, r.ListenURL, "a blank listen URL is unset")
}

func TestKafkaProperties(t *testing.T) {
	t.Parallel()
	c, err := LoadIngestor(env("KAFKA_PROPERTY_SECURITY_PROTOCOL=SASL_SSL", "KAFKA_PROPERTY_SASL_PASSWORD=p@ss=word"))
	require.NoError(t, err)
	require.Equal(t, map[string]string{"security.protocol": "SASL_SSL", "sasl.password": "p@ss=word"}, c.KafkaProperties)
}

func TestShortLeaseShortensDefaultPublishTimeout(t *testing.T) {
	t.Parallel()
	// The lease must cover the publish timeout + 5s report margin + 5s for
	// the marks; an unset publish timeout is derived from a short lease.
	c, err := LoadRelay(env("OUTBOX_LOCK_TIMEOUT=25s"))
	require.NoError(t, err)
	require.Equal(t, 15*time.Second, c.PublishTimeout)
	c, err = LoadRelay(env("OUTBOX_LOCK_TIMEOUT=40s"))
	require.NoError(t, err)
	require.Equal(t, 30*time.Second, c.PublishTimeout, "the default fits exactly")
}

func TestLeaseMustExceedPublishTimeout(t *testing.T) {
	t.Parallel()
	for _, environ := range [][]string{
		env("OUTBOX_LOCK_TIMEOUT=30s", "OUTBOX_PUBLISH_TIMEOUT=30s"),
		env("OUTBOX_LOCK_TIMEOUT=5s", "OUTBOX_PUBLISH_TIMEOUT=10s"),
	} {
		_, err := LoadRelay(environ)
		var cfgErr *Error
		require.True(t, errors.As(err, &cfgErr), "%v: want *config.Error, got %v", environ, err)
		require.Equal(t, "OUTBOX_LOCK_TIMEOUT", cfgErr.Var)
	}
	c, err := LoadRelay(env("OUTBOX_LOCK_TIMEOUT=40s", "OUTBOX_PUBLISH_TIMEOUT=30s"))
	require.NoError(t, err, "publish timeout + 10s exactly")
	require.Equal(t, 30*time.Second, c.PublishTimeout)
	c, err = LoadRelay(env("OUTBOX_LOCK_TIMEOUT=39s"))
	require.NoError(t, err, "an unset publish timeout is derived")
	require.Equal(t, 29*time.Second, c.PublishTimeout)
	// Short leases (tests, drills) are accepted: half for the publish.
	c, err = LoadRelay(env("OUTBOX_LOCK_TIMEOUT=4s"))
	require.NoError(t, err)
	require.Equal(t, 2*time.Second, c.PublishTimeout)
	c, err = LoadRelay(env("OUTBOX_LOCK_TIMEOUT=10s"))
	require.NoError(t, err)
	require.Equal(t, 5*time.Second, c.PublishTimeout)
}

func TestKafkaToolNeedsNoDatabase(t *testing.T) {
	t.Parallel()
	c, err := LoadKafkaTool([]string{"KAFKA_BOOTSTRAP_SERVERS=b:1", "TOPIC_INPUT=in"})
	require.NoError(t, err)
	require.Empty(t, c.DatabaseURL)
	require.Equal(t, "in", c.TopicInput)
	_, err = LoadKafkaTool([]string{"DATABASE_URL=postgres://x"})
	require.ErrorContains(t, err, "KAFKA_BOOTSTRAP_SERVERS")
}

// An empty property variable counts as unset, as every variable does.
func TestKafkaPropertiesEmptyIsUnset(t *testing.T) {
	t.Parallel()
	c, err := LoadIngestor(env("KAFKA_PROPERTY_LINGER_MS=", "KAFKA_PROPERTY_SECURITY_PROTOCOL=SASL_SSL", "KAFKA_CONSUMER_PROPERTY_SESSION_TIMEOUT_MS="))
	require.NoError(t, err)
	require.Equal(t, map[string]string{"security.protocol": "SASL_SSL"}, c.KafkaProperties)
	require.Equal(t, map[string]string{"security.protocol": "SASL_SSL"}, c.ConsumerProperties())
}

func TestKafkaPropertiesPerClient(t *testing.T) {
	t.Parallel()
	c, err := LoadIngestor(env(
		"KAFKA_PROPERTY_SECURITY_PROTOCOL=SASL_SSL",
		"KAFKA_PROPERTY_LINGER_MS=5",
		"KAFKA_CONSUMER_PROPERTY_GROUP_INSTANCE_ID=ingestor-0",
		"KAFKA_PRODUCER_PROPERTY_LINGER_MS=20",
	))
	require.NoError(t, err)
	require.Equal(t, map[string]string{"security.protocol": "SASL_SSL", "linger.ms": "5", "group.instance.id": "ingestor-0"}, c.ConsumerProperties())
	require.Equal(t, map[string]string{"security.protocol": "SASL_SSL", "linger.ms": "20"}, c.ProducerProperties())
	require.NotContains(t, c.KafkaProperties, "group.instance.id")
}

// TestRelayRulesNameTheVariable: a rule of relay.Config (its own bounds and
// cross-field rules) is reported under the variable that set the field.
func TestRelayRulesNameTheVariable(t *testing.T) {
	t.Parallel()
	for environ, want := range map[string]string{
		"OUTBOX_WORKERS=65":               "OUTBOX_WORKERS",
		"OUTBOX_BATCH_SIZE=100001":        "OUTBOX_BATCH_SIZE",
		"OUTBOX_RETENTION_BATCH=100001":   "OUTBOX_RETENTION_BATCH",
		"OUTBOX_RETENTION_INTERVAL=-1s":   "OUTBOX_RETENTION_INTERVAL",
		"OUTBOX_CLAIM_WATERMARK_MARGIN=0": "OUTBOX_CLAIM_WATERMARK_MARGIN",
		"OUTBOX_REINDEX_MIN_BYTES=0":      "OUTBOX_REINDEX_MIN_BYTES",
		"OUTBOX_REINDEX_INTERVAL=-1h":     "OUTBOX_REINDEX_INTERVAL",
	} {
		_, err := LoadRelay(env(environ))
		var cfgErr *Error
		require.True(t, errors.As(err, &cfgErr), "%s: want *config.Error, got %v", environ, err)
		require.Equal(t, want, cfgErr.Var)
	}
	c, err := LoadRelay(env("OUTBOX_RETENTION=0"))
	require.NoError(t, err)
	require.Negative(t, c.Retention, "0 disables the retention sweep")
	c, err = LoadRelay(env("OUTBOX_REINDEX_INTERVAL=0"))
	require.NoError(t, err)
	require.Negative(t, c.ReindexInterval, "0 turns the reindexer off")
	c, err = LoadRelay(env())
	require.NoError(t, err)
	require.Equal(t, time.Hour, c.ReindexInterval)
	require.Equal(t, int64(relay.DefaultReindexMinBytes), c.ReindexMinBytes)
	c, err = LoadRelay(env("OUTBOX_REINDEX_INTERVAL=6h", "OUTBOX_REINDEX_MIN_BYTES=1048576"))
	require.NoError(t, err)
	require.Equal(t, 6*time.Hour, c.ReindexInterval)
	require.Equal(t, int64(1<<20), c.ReindexMinBytes)
	c, err = LoadRelay(env("OUTBOX_CLAIM_FULL_SCAN_INTERVAL=0"))
	require.NoError(t, err)
	require.Negative(t, c.ClaimFullScanInterval, "0 turns the claim watermark off")
	c, err = LoadRelay(env("OUTBOX_RETENTION_INTERVAL=1m", "OUTBOX_RETENTION_BATCH=2000", "OUTBOX_CLAIM_FULL_SCAN_INTERVAL=30s", "OUTBOX_CLAIM_WATERMARK_MARGIN=1m"))
	require.NoError(t, err)
	require.Equal(t, time.Minute, c.RetentionInterval)
	require.Equal(t, 2000, c.RetentionBatch)
	require.Equal(t, 30*time.Second, c.ClaimFullScanInterval)
	require.Equal(t, time.Minute, c.ClaimWatermarkMargin)
	c, err = LoadRelay(env())
	require.NoError(t, err)
	require.Equal(t, 5*time.Second, c.StatsInterval)
	c, err = LoadRelay(env("OUTBOX_STATS_INTERVAL=30s"))
	require.NoError(t, err)
	require.Equal(t, 30*time.Second, c.StatsInterval)
}

// TestRelayDBTimeoutAndListenURL: OUTBOX_DB_TIMEOUT bounds the relay's
// database calls (default relay.DefaultDBTimeout); DATABASE_LISTEN_URL
// defaults to DATABASE_URL.
func TestRelayDBTimeoutAndListenURL(t *testing.T) {
	t.Parallel()
	c, err := LoadRelay(env())
	require.NoError(t, err)
	require.Equal(t, relay.DefaultDBTimeout, c.DBTimeout)
	require.Equal(t, c.DatabaseURL, c.ListenURL)
	c, err = LoadRelay(env("OUTBOX_DB_TIMEOUT=1500ms", "DATABASE_LISTEN_URL=postgres://direct/db"))
	require.NoError(t, err)
	require.Equal(t, 1500*time.Millisecond, c.DBTimeout)
	require.Equal(t, "postgres://direct/db", c.ListenURL)
	_, err = LoadRelay(env("OUTBOX_DB_TIMEOUT=-1s"))
	var cfgErr *Error
	require.True(t, errors.As(err, &cfgErr), "got %v", err)
	require.Equal(t, "OUTBOX_DB_TIMEOUT", cfgErr.Var)
}

func TestIngestDBTimeout(t *testing.T) {
	t.Parallel()
	c, err := LoadIngestor(env("INGEST_DB_TIMEOUT=5s"))
	require.NoError(t, err)
	require.Equal(t, 5*time.Second, c.Ingest.DBTimeout)
	c, err = LoadIngestor(env())
	require.NoError(t, err)
	require.Zero(t, c.Ingest.DBTimeout, "unset: 0, which ingest derives from the batch size")
}

func TestIngestCommitInterval(t *testing.T) {
	t.Parallel()
	c, err := LoadIngestor(env())
	require.NoError(t, err)
	require.Equal(t, 100*time.Millisecond, c.Ingest.CommitInterval, "the default")
	c, err = LoadIngestor(env("INGEST_COMMIT_INTERVAL=0"))
	require.NoError(t, err)
	require.Zero(t, c.Ingest.CommitInterval, "0 is a setting: a commit after every batch")
}

// propertyErr stands in for kafkax's PropertyError (config links no client).
type propertyErr struct {
	names, vars []string
}

func (e *propertyErr) Error() string                { return "refused" }
func (e *propertyErr) PropertyNames() []string      { return e.names }
func (e *propertyErr) SetVariables(names ...string) { e.vars = names }

// NameVariables names the variables that set a refused property, under
// any of its names, for the kind of client that refused it only.
func TestNameVariables(t *testing.T) {
	t.Parallel()
	c, err := LoadIngestor(env("KAFKA_PROPERTY_QUEUE_BUFFERING_MAX_MS=-5", "KAFKA_PRODUCER_PROPERTY_LINGER_MS=-1", "KAFKA_CONSUMER_PROPERTY_FETCH_MAX_BYTES=-1"))
	require.NoError(t, err)

	pe := &propertyErr{names: []string{"linger.ms", "queue.buffering.max.ms"}}
	require.Same(t, error(pe), c.NameVariables(fmt.Errorf("create kafka producer: %w", pe), false).(interface{ Unwrap() error }).Unwrap())
	require.Equal(t, []string{"KAFKA_PRODUCER_PROPERTY_LINGER_MS", "KAFKA_PROPERTY_QUEUE_BUFFERING_MAX_MS"}, pe.vars)

	pe = &propertyErr{names: []string{"linger.ms", "queue.buffering.max.ms"}}
	c.NameVariables(pe, true)
	require.Equal(t, []string{"KAFKA_PROPERTY_QUEUE_BUFFERING_MAX_MS"}, pe.vars, "a consumer never saw the producer's variable")

	pe = &propertyErr{names: []string{"fetch.max.bytes"}}
	c.NameVariables(pe, false)
	require.Nil(t, pe.vars, "the producer never saw the consumer's variable")

	pe = &propertyErr{}
	c.NameVariables(pe, true)
	require.Equal(t, []string{"KAFKA_CONSUMER_PROPERTY_FETCH_MAX_BYTES", "KAFKA_PROPERTY_QUEUE_BUFFERING_MAX_MS"}, pe.vars,
		"a message naming no property gets every variable that reached the client")

	other := errors.New("not a property")
	require.Same(t, other, c.NameVariables(other, true))
}

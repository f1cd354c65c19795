package ingest_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	neturl "net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pcp/route-processing/pkg/contractschema"
	"github.com/pcp/route-processing/pkg/dlq"
	"github.com/pcp/route-processing/pkg/ingest"
	"github.com/pcp/route-processing/pkg/kafkax"
	"github.com/pcp/route-processing/pkg/obs"
	"github.com/pcp/route-processing/pkg/outbox"
	"github.com/pcp/route-processing/pkg/passport"
	"github.com/pcp/route-processing/pkg/store"
	"github.com/pcp/route-processing/pkg/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const (
	topicProcessed = "pcp.route.in.v1"
	topicGeoRef    = "pcp.route.georeference.v1"
)

type testBundle struct {
	bootstrap string
	topic     string
	dlqTopic  string
	group     string
	dbURL     string
	pool      *pgxpool.Pool
	producer  *kafkax.Producer
	logger    *slog.Logger
	logs      logCounter // what logger logged (warnings and up, unless INGEST_TEST_DEBUG)
	// consumerProps are librdkafka properties for the consumers start makes.
	consumerProps map[string]string

	commitMu  sync.Mutex
	commitsAt map[int32]int64 // offsets seen by BeforeCommit (benchmark)
}

// reopen points the bundle's pool at b.dbURL.
func (b *testBundle) reopen(t testing.TB) {
	t.Helper()
	pool, err := store.Open(context.Background(), b.dbURL, "route-passport-ingestor")
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	b.pool = pool
	b.commitMu.Lock()
	b.commitsAt = map[int32]int64{}
	b.commitMu.Unlock()
}

func (b *testBundle) noteCommit(offsets map[int32]int64) {
	b.commitMu.Lock()
	defer b.commitMu.Unlock()
	if b.commitsAt == nil {
		b.commitsAt = map[int32]int64{}
	}
	for p, o := range offsets {
		b.commitsAt[p] = max(b.commitsAt[p], o)
	}
}

func (b *testBundle) reachedEnd(end map[int32]int64) bool {
	b.commitMu.Lock()
	defer b.commitMu.Unlock()
	for p, o := range end {
		if b.commitsAt[p] < o {
			return false
		}
	}
	return true
}

func setup(t testing.TB, partitions int, dbURL string) *testBundle {
	t.Helper()
	b := &testBundle{bootstrap: testenv.KafkaBootstrap(t)}
	b.topic = testenv.Topic(t, "ingest-in", partitions)
	b.dlqTopic = testenv.Topic(t, "ingest-dlq", 1)
	b.group = "ingest-test-" + uuid.NewString()[:8]
	if dbURL == "" {
		dbURL = testenv.DatabaseURL(t)
	}
	b.dbURL = dbURL
	ctx := context.Background()
	pool, err := store.Open(ctx, dbURL, "route-passport-ingestor")
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	b.pool = pool
	level := slog.LevelWarn
	if os.Getenv("INGEST_TEST_DEBUG") != "" {
		level = slog.LevelDebug
	}
	b.logs = logCounter{slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: level}), &sync.Mutex{}, &[]string{}}
	b.logger = slog.New(b.logs)
	b.dlqAt(t, b.bootstrap, 10*time.Second)
	return b
}

// dlqAt makes the bundle's DLQ producer one of bootstrap's brokers, with
// b.logger and deliveryTimeout, closed with the test.
func (b *testBundle) dlqAt(t testing.TB, bootstrap string, deliveryTimeout time.Duration) {
	t.Helper()
	p, err := kafkax.NewProducer(b.logger, kafkax.ProducerConfig{
		ClientConfig:    kafkax.ClientConfig{BootstrapServers: bootstrap, ClientID: "ingest-test-dlq"},
		DeliveryTimeout: deliveryTimeout,
	})
	require.NoError(t, err)
	t.Cleanup(func() { p.Close(5 * time.Second) })
	b.producer = p
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// running is one ingestor instance.
type running struct {
	cancel func()
	done   chan struct{} // closed when Run returned
	err    error         // Run's error, once done
	http   *httptest.Server
	reg    *prometheus.Registry
	closed sync.Once
	cons   *kafkax.Consumer
}

// stop ends Run and closes the consumer; it returns Run's error.
func (r *running) stop(t testing.TB) error {
	t.Helper()
	r.cancel()
	start := time.Now()
	select {
	case <-r.done:
	case <-time.After(40 * time.Second):
		t.Fatal("ingest did not stop within 40s")
	}
	require.Less(t, time.Since(start), 30*time.Second, "shutdown within 30s")
	r.closed.Do(func() { require.NoError(t, r.cons.Close()) })
	return r.err
}

func (b *testBundle) start(t testing.TB, mods ...func(*ingest.Config)) *running {
	t.Helper()
	reg := obs.NewRegistry()
	ready := obs.NewReadiness(reg, "route_passport_ingest")
	metrics := ingest.NewMetrics(reg)
	cons, err := kafkax.NewConsumer(b.logger, kafkax.ConsumerConfig{
		ClientConfig: kafkax.ClientConfig{BootstrapServers: b.bootstrap, ClientID: "ingest-test", Properties: b.consumerProps},
		GroupID:      b.group,
		Topic:        b.topic,
	})
	require.NoError(t, err)
	passports := store.NewPassports(b.pool, 10)
	cfg := ingest.Config{
		ConsumerGroup: b.group,
		DLQTopic:      b.dlqTopic,
		Events: passport.EventConfig{
			TopicProcessedRoute: topicProcessed, TopicRouteGeoreference: topicGeoRef, MessageKey: "traceId",
		},
		BatchSize:     500,
		RecordRetries: 2,
		MinBackoff:    20 * time.Millisecond,
		MaxBackoff:    500 * time.Millisecond,
	}
	for _, m := range mods {
		m(&cfg)
	}
	in, err := ingest.New(b.logger, cfg, cons, passports, b.producer, metrics, ready)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan struct{}), reg: reg, cons: cons}
	r.http = httptest.NewServer(obs.Handler(reg, ready))
	t.Cleanup(r.http.Close)
	go func() {
		r.err = in.Run(ctx)
		close(r.done)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-r.done:
		case <-time.After(40 * time.Second):
		}
		r.closed.Do(func() { _ = cons.Close() })
	})
	return r
}

func (r *running) readyz(t testing.TB) int {
	code, _ := r.readyzBody(t)
	return code
}

// readyzBody returns /readyz's status and body.
func (r *running) readyzBody(t testing.TB) (int, string) {
	resp, err := http.Get(r.http.URL + "/readyz")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

// endOffsets returns, per partition, one past the highest offset of recs.
func endOffsets(recs []testenv.Record) map[int32]int64 {
	out := map[int32]int64{}
	for _, r := range recs {
		if r.Offset+1 > out[r.Partition] {
			out[r.Partition] = r.Offset + 1
		}
	}
	return out
}

// warmUp produces n valid passports, waits until r committed them and
// reports ready: the steady start of a test that then breaks something. It
// returns the produced records and their route ids.
func (b *testBundle) warmUp(t testing.TB, r *running, n int) ([]testenv.Record, []string) {
	t.Helper()
	recs, ids := validRecords(t, n)
	all := testenv.Produce(t, b.bootstrap, b.topic, recs...)
	b.waitCommitted(t, endOffsets(all), 60*time.Second)
	require.Eventually(t, func() bool { return r.readyz(t) == http.StatusOK }, 10*time.Second, 50*time.Millisecond)
	return all, ids
}

// waitCommitted waits until the group's committed offsets reach want.
func (b *testBundle) waitCommitted(t testing.TB, want map[int32]int64, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var got map[int32]int64
	for time.Now().Before(deadline) {
		got = b.committed(t)
		ok := true
		for p, o := range want {
			if got[p] < o {
				ok = false
			}
		}
		if ok {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("committed offsets %v did not reach %v within %s", got, want, timeout)
}

// committed returns the group's committed offsets on the topic; none while
// the group does not exist yet.
func (b *testBundle) committed(t testing.TB) map[int32]int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(b.bootstrap, ",")...))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resps, err := kadm.NewClient(cl).FetchOffsets(ctx, b.group)
	if err == nil {
		err = resps.Error()
	}
	out := map[int32]int64{}
	if errors.Is(err, kerr.GroupIDNotFound) {
		return out
	}
	require.NoError(t, err)
	for p, o := range resps[b.topic] {
		if o.At >= 0 {
			out[p] = o.At
		}
	}
	return out
}

func (b *testBundle) count(t testing.TB, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

var (
	templateOnce sync.Once
	templateDoc  map[string]any
)

func contractDir() string { return filepath.Join("..", "..", "testdata", "contract") }

// passportValue returns a valid input value for routeID, with name as the
// full route name.
func passportValue(t testing.TB, routeID, name string) []byte {
	t.Helper()
	templateOnce.Do(func() {
		raw, err := os.ReadFile(filepath.Join(contractDir(), "valid-polygon.json"))
		if err != nil {
			panic(err)
		}
		if err := json.Unmarshal(raw, &templateDoc); err != nil {
			panic(err)
		}
	})
	raw, err := json.Marshal(templateDoc)
	require.NoError(t, err)
	var doc map[string]any
	require.NoError(t, json.Unmarshal(raw, &doc))
	data := doc["data"].(map[string]any)
	props := data["properties"].(map[string]any)
	props["pcp:route_id"] = routeID
	props["pcp:route_name_full"] = name
	data["id"] = "item-" + routeID
	doc["traceId"] = "trace-" + routeID[:8]
	out, err := json.Marshal(doc)
	require.NoError(t, err)
	return out
}

func validRecords(t testing.TB, n int) ([]testenv.Record, []string) {
	recs := make([]testenv.Record, n)
	ids := make([]string, n)
	for i := range recs {
		ids[i] = uuid.NewString()
		recs[i] = testenv.Record{Key: []byte(ids[i]), Value: passportValue(t, ids[i], fmt.Sprintf("route %d", i))}
	}
	return recs, ids
}

func TestContractExamples(t *testing.T) {
	t.Parallel()
	b := setup(t, 3, "")

	var expOut map[string]struct {
		Key           string          `json:"key"`
		Data          json.RawMessage `json:"data"`
		TraceID       *string         `json:"traceId"`
		CorrelationID *string         `json:"correlationId"`
	}
	var expDLQ map[string]struct {
		Category string  `json:"category"`
		Field    *string `json:"field"`
	}
	readJSON := func(name string, v any) {
		raw, err := os.ReadFile(filepath.Join(contractDir(), name))
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(raw, v))
	}
	readJSON("expected-outputs.json", &expOut)
	readJSON("expected-dlq.json", &expDLQ)
	schemas, err := contractschema.New()
	require.NoError(t, err)
	require.NotEmpty(t, expOut)
	require.NotEmpty(t, expDLQ)

	// Each file once with a traceparent header and a key, once without.
	var recs []testenv.Record
	var names []string
	for name := range expOut {
		v, err := os.ReadFile(filepath.Join(contractDir(), name))
		require.NoError(t, err)
		recs = append(recs, testenv.Record{Key: []byte("k-" + name), Value: v, Headers: []testenv.Header{
			{Key: "traceparent", Value: []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")},
			{Key: "x-origin", Value: []byte("test")},
		}})
		names = append(names, name)
	}
	for name := range expDLQ {
		v, err := os.ReadFile(filepath.Join(contractDir(), name))
		require.NoError(t, err)
		recs = append(recs, testenv.Record{Key: []byte("k-" + name), Value: v, Headers: []testenv.Header{{Key: "x-origin", Value: []byte("test")}}})
		names = append(names, name)
	}
	produced := testenv.Produce(t, b.bootstrap, b.topic, recs...)
	byName := map[string]testenv.Record{}
	for i, r := range produced {
		byName[names[i]] = r
	}

	r := b.start(t)
	b.waitCommitted(t, endOffsets(produced), 60*time.Second)
	require.Equal(t, http.StatusOK, r.readyz(t))

	ctx := context.Background()
	t.Run("Valid", func(t *testing.T) {
		require.Equal(t, len(expOut), b.count(t, "select count(*) from route_passports"))
		require.Equal(t, 2*len(expOut), b.count(t, "select count(*) from route_passport_outbox"))
		for name, exp := range expOut {
			in := byName[name]
			p, err := passport.Parse(in.Value, passport.Limits{})
			require.NoError(t, err, name)
			var data map[string]any
			require.NoError(t, json.Unmarshal(exp.Data, &data))
			routeID := data["routeId"].(string)

			var (
				row     map[string]any
				polJSON []byte
				rawOK   bool
			)
			rows, err := b.pool.Query(ctx, `select route_name_full, route_name_short, ka_short, ka_full, orbit_number,
				orbit_state, interval_begin, interval_end, roll_angle_min, roll_angle_max, visir_angle_min, visir_angle_max,
				resolution_range, resolution_azimuth, processing_level, geometry_wkt, route_status, trace_id, correlation_id,
				source_topic, source_partition, source_offset, source_key
				from route_passports where route_id = $1`, routeID)
			require.NoError(t, err)
			require.True(t, rows.Next(), name)
			vals, err := rows.Values()
			require.NoError(t, err)
			descs := rows.FieldDescriptions()
			row = map[string]any{}
			for i, d := range descs {
				row[d.Name] = vals[i]
			}
			rows.Close()
			require.NoError(t, b.pool.QueryRow(ctx, `select polarisation::text, raw_payload = $2::jsonb from route_passports where route_id = $1`,
				routeID, string(in.Value)).Scan(&polJSON, &rawOK))
			require.True(t, rawOK, "%s: raw_payload is the input value", name)

			require.Equal(t, data["routeNameFull"], row["route_name_full"], name)
			require.Equal(t, data["routeNameShort"], row["route_name_short"], name)
			require.Equal(t, data["kaShort"], row["ka_short"], name)
			require.Equal(t, data["kaFull"], row["ka_full"], name)
			require.EqualValues(t, data["orbitNumber"], row["orbit_number"], name)
			require.Equal(t, data["orbitState"], row["orbit_state"], name)
			require.Equal(t, data["intervalBegin"], row["interval_begin"].(time.Time).UTC().Format(time.RFC3339Nano), name)
			require.Equal(t, data["intervalEnd"], row["interval_end"].(time.Time).UTC().Format(time.RFC3339Nano), name)
			roll, visir := data["rollAngle"].(map[string]any), data["visirAngle"].(map[string]any)
			require.Equal(t, roll["min"], row["roll_angle_min"], name)
			require.Equal(t, roll["max"], row["roll_angle_max"], name)
			require.Equal(t, visir["min"], row["visir_angle_min"], name)
			require.Equal(t, visir["max"], row["visir_angle_max"], name)
			require.Equal(t, data["resolutionRange"], row["resolution_range"], name)
			require.Equal(t, data["resolutionAzimuth"], row["resolution_azimuth"], name)
			wantPol, _ := json.Marshal(data["polarisation"])
			require.JSONEq(t, string(wantPol), string(polJSON), name)
			require.Equal(t, data["processingLevel"], row["processing_level"], name)
			require.Equal(t, p.GeometryWKT, row["geometry_wkt"], name)
			require.Equal(t, data["routeStatus"], row["route_status"], name)
			if exp.TraceID == nil {
				require.Nil(t, row["trace_id"], name)
			} else {
				require.Equal(t, *exp.TraceID, row["trace_id"], name)
			}
			if exp.CorrelationID == nil {
				require.Nil(t, row["correlation_id"], name)
			} else {
				require.Equal(t, *exp.CorrelationID, row["correlation_id"], name)
			}
			require.Equal(t, b.topic, row["source_topic"], name)
			require.EqualValues(t, in.Partition, row["source_partition"], name)
			require.Equal(t, in.Offset, row["source_offset"], name)
			require.Equal(t, in.Key, row["source_key"], name)

			for _, ev := range []struct{ typ, topic string }{
				{passport.EventModeStatusChanged, topicProcessed},
				{passport.EventRouteGeoRef, topicGeoRef},
			} {
				var (
					id                             uuid.UUID
					topic, key, status             string
					payloadOK                      bool
					headers                        map[string]string
					attempts, maxAttempts          int
					nextAttemptAt, created, dueNow time.Time
				)
				require.NoError(t, b.pool.QueryRow(ctx, `select id, topic, message_key, payload = $3::jsonb, headers, status,
					attempts, max_attempts, next_attempt_at, created_at, now()
					from route_passport_outbox where route_id = $1 and event_type = $2`,
					routeID, ev.typ, string(p.Payload(ev.typ))).Scan(&id, &topic, &key, &payloadOK, &headers, &status,
					&attempts, &maxAttempts, &nextAttemptAt, &created, &dueNow), name)
				require.Equal(t, ev.topic, topic, name)
				require.Equal(t, exp.Key, key, name)
				require.True(t, payloadOK, "%s %s: payload is p.Payload", name, ev.typ)
				require.Equal(t, "PENDING", status)
				require.Equal(t, 0, attempts)
				require.Equal(t, 10, maxAttempts)
				require.False(t, nextAttemptAt.After(dueNow))
				require.Equal(t, uuid.Version(7), id.Version(), "outbox ids are UUIDv7")
				want := map[string]string{"type": ev.typ, "eventId": id.String(),
					"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
				if exp.TraceID != nil && *exp.TraceID != "" {
					want["traceId"] = *exp.TraceID
				}
				if exp.CorrelationID != nil && *exp.CorrelationID != "" {
					want["correlationId"] = *exp.CorrelationID
				}
				require.Equal(t, want, headers, name)
				require.NoError(t, contractschema.ValidateOutput(schemas, []byte(key), p.Payload(ev.typ), outbox.OrderHeaders(headers)), name)

				var payload map[string]any
				require.NoError(t, json.Unmarshal(p.Payload(ev.typ), &payload))
				require.Equal(t, ev.typ, payload["type"])
			}
		}
	})

	t.Run("Invalid", func(t *testing.T) {
		dead := testenv.ReadAll(t, b.bootstrap, b.dlqTopic)
		require.Len(t, dead, len(expDLQ))
		byOffset := map[string]testenv.Record{}
		for _, d := range dead {
			part, ok := d.Header(dlq.HeaderOriginalPartition)
			require.True(t, ok)
			off, ok := d.Header(dlq.HeaderOriginalOffset)
			require.True(t, ok)
			require.Len(t, part, 4)
			require.Len(t, off, 8)
			byOffset[fmt.Sprintf("%d/%d", int32(binary.BigEndian.Uint32([]byte(part))), int64(binary.BigEndian.Uint64([]byte(off))))] = d
		}
		for name, exp := range expDLQ {
			in := byName[name]
			d, ok := byOffset[fmt.Sprintf("%d/%d", in.Partition, in.Offset)]
			require.True(t, ok, "%s: no DLQ record", name)
			require.Equal(t, in.Key, d.Key, name)
			require.Equal(t, in.Value, d.Value, name)
			require.Equal(t, testenv.Header{Key: "x-origin", Value: []byte("test")}, d.Headers[0], "original headers first, unchanged")
			h := func(k string) string { v, _ := d.Header(k); return v }
			require.Equal(t, b.topic, h(dlq.HeaderOriginalTopic))
			ts := h(dlq.HeaderOriginalTimestamp)
			require.Len(t, ts, 8)
			require.Equal(t, in.Timestamp.UnixMilli(), int64(binary.BigEndian.Uint64([]byte(ts))), name)
			require.Contains(t, []string{"CreateTime", "LogAppendTime"}, h(dlq.HeaderOriginalTimestampType))
			require.Equal(t, b.group, h(dlq.HeaderOriginalGroup))
			require.Equal(t, dlq.FQCNContractViolation, h(dlq.HeaderExceptionFQCN))
			require.NotEmpty(t, h(dlq.HeaderExceptionMessage))
			require.Equal(t, exp.Category, h(dlq.HeaderErrorCategory), name)
			require.NoError(t, contractschema.ValidateDLQ(schemas, d.Headers), name)
			field, hasField := d.Header(dlq.HeaderErrorField)
			if exp.Field == nil {
				require.False(t, hasField, "%s: no field header", name)
			} else {
				require.True(t, hasField, name)
				require.True(t, strings.HasPrefix(field, *exp.Field), "%s: field %q, want prefix %q", name, field, *exp.Field)
				require.Contains(t, h(dlq.HeaderExceptionMessage), *exp.Field, "%s: message names the field", name)
			}
		}
		// Nothing of them reached the database.
		require.Equal(t, len(expOut), b.count(t, "select count(*) from route_passports"))
	})
	require.NoError(t, r.stop(t))
}

func TestRedeliveryAndUpdate(t *testing.T) {
	t.Parallel()
	b := setup(t, 2, "")
	recs, ids := validRecords(t, 50)
	produced := testenv.Produce(t, b.bootstrap, b.topic, recs...)
	r := b.start(t)
	b.waitCommitted(t, endOffsets(produced), 60*time.Second)
	require.NoError(t, r.stop(t))

	ctx := context.Background()
	outboxIDs := func() map[string]bool {
		rows, err := b.pool.Query(ctx, "select id::text from route_passport_outbox")
		require.NoError(t, err)
		defer rows.Close()
		m := map[string]bool{}
		for rows.Next() {
			var s string
			require.NoError(t, rows.Scan(&s))
			m[s] = true
		}
		return m
	}
	before := outboxIDs()
	require.Len(t, before, 100)
	var updatedBefore, createdBefore time.Time
	require.NoError(t, b.pool.QueryRow(ctx, "select updated_at, created_at from route_passports where route_id = $1", ids[7]).Scan(&updatedBefore, &createdBefore))

	// The same records again, plus an update of route 7, twice in a row
	// (same batch: the later wins).
	again := append([]testenv.Record{}, recs...)
	again = append(again,
		testenv.Record{Key: []byte(ids[7]), Value: passportValue(t, ids[7], "renamed once")},
		testenv.Record{Key: []byte(ids[7]), Value: passportValue(t, ids[7], "renamed twice")})
	produced2 := testenv.Produce(t, b.bootstrap, b.topic, again...)
	r = b.start(t)
	b.waitCommitted(t, endOffsets(produced2), 60*time.Second)
	require.NoError(t, r.stop(t))

	// A group reset: a new group reads the whole topic again.
	b.group = b.group + "-reset"
	r = b.start(t)
	b.waitCommitted(t, endOffsets(produced2), 60*time.Second)
	require.NoError(t, r.stop(t))

	require.Equal(t, before, outboxIDs(), "no new outbox rows on redelivery")
	require.Equal(t, 50, b.count(t, "select count(*) from route_passports"))
	var name string
	var updatedAfter, createdAfter time.Time
	require.NoError(t, b.pool.QueryRow(ctx, "select route_name_full, updated_at, created_at from route_passports where route_id = $1", ids[7]).
		Scan(&name, &updatedAfter, &createdAfter))
	require.Equal(t, "renamed twice", name)
	require.True(t, updatedAfter.After(updatedBefore), "updated_at moves")
	require.Equal(t, createdBefore, createdAfter, "created_at is kept")
	require.Empty(t, testenv.ReadAll(t, b.bootstrap, b.dlqTopic))
}

func TestDatabaseRejectsOneRecord(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, "")
	recs, ids := validRecords(t, 21)
	// Valid by contract (an ignored field), refused by jsonb: a number
	// PostgreSQL's numeric cannot hold.
	bad := strings.Replace(string(recs[10].Value), `"source":"survey-planner"`, `"source":1e-20000`, 1)
	require.NotEqual(t, string(recs[10].Value), bad)
	recs[10].Value = []byte(bad)
	_, err := passport.Parse(recs[10].Value, passport.Limits{})
	require.NoError(t, err)

	produced := testenv.Produce(t, b.bootstrap, b.topic, recs...)
	r := b.start(t)
	b.waitCommitted(t, endOffsets(produced), 60*time.Second)
	require.NoError(t, r.stop(t))

	require.Equal(t, 20, b.count(t, "select count(*) from route_passports"))
	require.Equal(t, 0, b.count(t, "select count(*) from route_passports where route_id = $1", ids[10]))
	require.Equal(t, 40, b.count(t, "select count(*) from route_passport_outbox"))
	dead := testenv.ReadAll(t, b.bootstrap, b.dlqTopic)
	require.Len(t, dead, 1)
	require.Equal(t, recs[10].Value, dead[0].Value)
	cat, _ := dead[0].Header(dlq.HeaderErrorCategory)
	require.Equal(t, "RETRYABLE", cat)
	fqcn, _ := dead[0].Header(dlq.HeaderExceptionFQCN)
	require.Equal(t, dlq.FQCNDatabaseRejection, fqcn)
	_, hasField := dead[0].Header(dlq.HeaderErrorField)
	require.False(t, hasField)
	msg, _ := dead[0].Header(dlq.HeaderExceptionMessage)
	require.Contains(t, msg, "SQLSTATE")
}

func TestCrashBetweenDatabaseAndOffsetCommit(t *testing.T) {
	t.Parallel()
	b := setup(t, 2, "")
	recs, _ := validRecords(t, 40)
	produced := testenv.Produce(t, b.bootstrap, b.topic, recs...)

	written := make(chan struct{})
	var once sync.Once
	r := b.start(t, func(c *ingest.Config) {
		c.BeforeCommit = func(map[int32]int64) error {
			once.Do(func() { close(written) })
			return errors.New("simulated crash")
		}
	})
	select {
	case <-written:
	case <-time.After(60 * time.Second):
		t.Fatal("no commit attempted")
	}
	err := r.stop(t)
	require.Error(t, err)
	require.Empty(t, b.committed(t), "nothing committed")
	rowsBefore := b.count(t, "select count(*) from route_passports")
	require.Positive(t, rowsBefore)
	outboxBefore := b.count(t, "select count(*) from route_passport_outbox")

	r = b.start(t)
	b.waitCommitted(t, endOffsets(produced), 60*time.Second)
	require.NoError(t, r.stop(t))
	require.Equal(t, 40, b.count(t, "select count(*) from route_passports"))
	require.Equal(t, 80, b.count(t, "select count(*) from route_passport_outbox"))
	require.GreaterOrEqual(t, 80, outboxBefore)
}

// The input topic deleted and created again under a running ingestor:
// librdkafka resets the position to the new log's start
// (auto.offset.reset=earliest) and every record of the new topic is
// written, though its offsets repeat ones already polled. Before, those
// were skipped as redeliveries and the group committed past them.
func TestInputTopicRecreated(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, "")
	// The client notices the topic's return at a metadata refresh: every
	// 5 minutes by default (README, runbook).
	b.consumerProps = map[string]string{"topic.metadata.refresh.interval.ms": "1000"}
	r := b.start(t)
	first, _ := b.warmUp(t, r, 12)

	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(b.bootstrap, ",")...))
	require.NoError(t, err)
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = adm.DeleteTopic(ctx, b.topic)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, err := adm.CreateTopic(ctx, 1, -1, nil, b.topic)
		return err == nil
	}, 20*time.Second, 100*time.Millisecond, "create the topic again")

	// Fewer records than were read before: the position is past the new
	// log's end, so librdkafka resets it.
	recs, _ := validRecords(t, 20)
	again := testenv.Produce(t, b.bootstrap, b.topic, recs[:5]...)
	time.Sleep(3 * time.Second)
	again = append(again, testenv.Produce(t, b.bootstrap, b.topic, recs[5:]...)...)
	require.Less(t, again[0].Offset, first[len(first)-1].Offset, "the new topic's offsets repeat the old ones")
	start := time.Now()
	require.Eventually(t, func() bool { return b.count(t, "select count(*) from route_passports") == 12+20 }, 60*time.Second, 100*time.Millisecond,
		"every record of the new topic is written: %d rows", b.count(t, "select count(*) from route_passports"))
	b.waitCommitted(t, endOffsets(again), 30*time.Second)
	t.Logf("figures: the new topic's records written %s after the last was produced", time.Since(start).Round(time.Millisecond))
	require.NoError(t, r.stop(t))
	require.Equal(t, 1, b.logs.count("the partition's offsets went back"))
}

func TestSecondConsumerJoins(t *testing.T) {
	t.Parallel()
	b := setup(t, 4, "")
	r1 := b.start(t, func(c *ingest.Config) { c.BatchSize = 20 })
	var all []testenv.Record
	var r2 *running
	for round := range 20 {
		recs, _ := validRecords(t, 25)
		all = append(all, testenv.Produce(t, b.bootstrap, b.topic, recs...)...)
		if round == 8 {
			r2 = b.start(t, func(c *ingest.Config) { c.BatchSize = 20 })
		}
		time.Sleep(100 * time.Millisecond)
	}
	b.waitCommitted(t, endOffsets(all), 90*time.Second)
	require.NoError(t, r1.stop(t))
	require.NoError(t, r2.stop(t))
	require.Equal(t, 500, b.count(t, "select count(*) from route_passports"))
	require.Equal(t, 1000, b.count(t, "select count(*) from route_passport_outbox"))
	require.Empty(t, testenv.ReadAll(t, b.bootstrap, b.dlqTopic))
}

func TestPostgresOutage(t *testing.T) {
	t.Parallel()
	cluster := testenv.NewPostgresCluster(t, testenv.PostgresOptions{})
	url := cluster.CreateDatabase(t, "outage", true)
	b := setup(t, 2, url)
	// The default backoff cap (30s): the recovery must come from the
	// probe, not from a short backoff.
	r := b.start(t, func(c *ingest.Config) { c.MaxBackoff = 30 * time.Second })

	var all []testenv.Record
	produce := func(n int) {
		recs, _ := validRecords(t, n)
		all = append(all, testenv.Produce(t, b.bootstrap, b.topic, recs...)...)
	}
	produce(30)
	b.waitCommitted(t, endOffsets(all), 60*time.Second)
	require.Eventually(t, func() bool { return r.readyz(t) == http.StatusOK }, 10*time.Second, 50*time.Millisecond)

	cluster.Stop(t)
	outageStart := time.Now()
	notReadySeen := false
	var reasons []string
	for time.Since(outageStart) < 20*time.Second {
		produce(10)
		code, body := r.readyzBody(t)
		if code != http.StatusOK {
			notReadySeen = true
			reasons = append(reasons, strings.TrimSpace(body))
		} else {
			// Records keep arriving: once the first write failed, the
			// database must stay not ready until it is back.
			require.False(t, notReadySeen, "ready again during the outage")
		}
		time.Sleep(500 * time.Millisecond)
	}
	require.True(t, notReadySeen, "/readyz never reported the outage")
	// The reason names the kind of failure (a write that met the shutdown
	// says 57P01, one after it the lost or refused connection), not pgx's
	// message with the user, database and host.
	last := reasons[len(reasons)-1]
	require.Regexp(t, `postgres: (connection refused|connection lost|no answer|server error, SQLSTATE 57P0[1-3])`, last)
	parsed, err := neturl.Parse(url)
	require.NoError(t, err)
	for _, secret := range []string{parsed.User.Username(), parsed.Host, strings.TrimPrefix(parsed.Path, "/")} {
		for _, reason := range reasons {
			// The component is named postgres, as the test cluster's user may be.
			require.NotContains(t, strings.ReplaceAll(reason, "postgres: ", ""), secret)
		}
	}
	committedDuring := b.committed(t)
	cluster.Start(t)
	back := time.Now()

	require.Eventually(t, func() bool { return r.readyz(t) == http.StatusOK }, 30*time.Second, 20*time.Millisecond)
	ready := time.Since(back)
	b.waitCommitted(t, endOffsets(all), 90*time.Second)
	written := time.Since(back)
	t.Logf("figures: postgres down 20s: ready %.2fs, everything written and committed %.2fs after it was back; produced %d; dlq 0",
		ready.Seconds(), written.Seconds(), len(all))
	require.LessOrEqual(t, ready, 2*time.Second, "ready within 2s of PostgreSQL's return")
	require.NoError(t, r.stop(t))
	require.Empty(t, testenv.ReadAll(t, b.bootstrap, b.dlqTopic), "nothing dead-lettered")
	require.Equal(t, len(all), b.count(t, "select count(*) from route_passports"))
	require.Equal(t, 2*len(all), b.count(t, "select count(*) from route_passport_outbox"))
	for p, o := range committedDuring {
		require.LessOrEqual(t, o, endOffsets(all)[p])
	}
}

// An idle ingestor (no input) sees PostgreSQL go away: not ready within
// seconds, ready again once it is back. Without input no write fails, so
// only its idle probe can tell.
func TestPostgresOutageWhileIdle(t *testing.T) {
	t.Parallel()
	cluster := testenv.NewPostgresCluster(t, testenv.PostgresOptions{})
	url := cluster.CreateDatabase(t, "idle", true)
	b := setup(t, 1, url)
	r := b.start(t)
	recs, _ := validRecords(t, 5)
	all := testenv.Produce(t, b.bootstrap, b.topic, recs...)
	b.waitCommitted(t, endOffsets(all), 60*time.Second)
	require.Eventually(t, func() bool { return r.readyz(t) == http.StatusOK }, 10*time.Second, 50*time.Millisecond)

	cluster.Stop(t)
	down := time.Now()
	require.Eventually(t, func() bool { return r.readyz(t) != http.StatusOK }, 15*time.Second, 50*time.Millisecond,
		"/readyz stayed 200 with PostgreSQL stopped and no input")
	t.Logf("figures: not ready %.1fs after PostgreSQL stopped (idle)", time.Since(down).Seconds())
	cluster.Start(t)
	require.Eventually(t, func() bool { return r.readyz(t) == http.StatusOK }, 15*time.Second, 50*time.Millisecond)
	require.NoError(t, r.stop(t))
}

// An ingestor started while PostgreSQL cannot be reached consumes nothing:
// an invalid record waiting in the topic is not dead-lettered (contract
// §1.5: while the database is unavailable nothing is), and once the
// database answers both records end where they belong.
func TestNothingConsumedBeforePostgresAnswers(t *testing.T) {
	t.Parallel()
	cluster := testenv.NewPostgresCluster(t, testenv.PostgresOptions{})
	url := cluster.CreateDatabase(t, "unreached", true)
	b := setup(t, 1, url)
	cluster.Stop(t)

	recs, _ := validRecords(t, 1)
	recs = append(recs, testenv.Record{Value: []byte(`{"data":`)})
	all := testenv.Produce(t, b.bootstrap, b.topic, recs...)
	r := b.start(t)
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
		require.NotEqual(t, http.StatusOK, r.readyz(t))
	}
	require.Empty(t, testenv.ReadAll(t, b.bootstrap, b.dlqTopic), "dead-lettered while the database was unreachable")

	cluster.Start(t)
	b.waitCommitted(t, endOffsets(all), 60*time.Second)
	require.NoError(t, r.stop(t))
	require.Len(t, testenv.ReadAll(t, b.bootstrap, b.dlqTopic), 1)
	require.Equal(t, 1, b.count(t, "select count(*) from route_passports"))
}

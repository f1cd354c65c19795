package dlqreplay_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pcp/route-processing/pkg/dlq"
	"github.com/pcp/route-processing/pkg/record"
	"github.com/pcp/route-processing/pkg/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestReplayIntegration runs bin/ingestor (built for the test, a normal
// build) against the shared broker and PostgreSQL: the real ingest
// pipeline dead-letters a record, and the real `ingestor dlq-replay` brings
// it back.
func TestReplayIntegration(t *testing.T) {
	t.Parallel()
	bin := buildIngestor(t)

	t.Run("a passport dead-lettered for its size is ingested after the limit is raised", func(t *testing.T) {
		t.Parallel()
		s := newStack(t, bin, 1)
		value := bigPassport(t, routeID)

		// 1. The ingestor with a 1500-byte limit dead-letters the ~2 KB passport.
		ing := s.startIngestor(t, "INGEST_MAX_VALUE_BYTES=1500")
		testenv.Produce(t, s.bootstrap, s.input, testenv.Record{
			Key:     []byte("route-key"),
			Value:   value,
			Headers: []testenv.Header{{Key: "traceparent", Value: []byte(traceparent)}},
		})
		dead := testenv.Consume(t, s.bootstrap, s.dlq, 1, 90*time.Second)
		require.Len(t, dead, 1)
		cat, _ := dead[0].Header(dlq.HeaderErrorCategory)
		require.Equal(t, string(dlq.CategoryContract), cat, "dead-lettered as a contract error")
		require.Equal(t, value, dead[0].Value)
		ing.stop(t)
		n, err := s.passportCount(routeID)
		require.NoError(t, err)
		require.Equal(t, 0, n, "nothing written for a dead-lettered record")

		// A record of another category in the DLQ must stay there.
		testenv.Produce(t, s.bootstrap, s.dlq, testenv.Record{
			Key:     []byte("other"),
			Value:   []byte(`{"not":"replayed"}`),
			Headers: dlqHeaders(dlq.CategoryRetryable, "data"),
		})

		// 2. The limit back at its default.
		ing = s.startIngestor(t)

		// 3. Replay the CONTRACT records; DATABASE_URL is not given.
		out, code := s.replay(t, "--category", "CONTRACT")
		require.Equal(t, 0, code, out)
		require.Contains(t, out, "selected=1 replayed=1 skipped=1 failed=0 scanned=2", out)
		require.Contains(t, out, `replayed dlq_partition=0 dlq_offset=0 `)
		// The ingestor's own dead-letter headers decode.
		require.Contains(t, out, fmt.Sprintf(`original_topic=%q original_partition=0 original_offset=0 original_time=`, s.input))
		require.Contains(t, out, `category="CONTRACT"`)
		require.NotContains(t, out, "KA-7 route 0412", "values are never printed")

		// The input topic got the original record back, dead-letter
		// headers stripped.
		in := testenv.Consume(t, s.bootstrap, s.input, 2, 30*time.Second)
		require.Len(t, in, 2)
		replayed := in[1]
		require.Equal(t, []byte("route-key"), replayed.Key)
		require.Equal(t, value, replayed.Value)
		require.Equal(t, []testenv.Header{{Key: "traceparent", Value: []byte(traceparent)}}, replayed.Headers)

		// 4. The ingestor (default limit) writes the passport.
		require.Eventually(t, func() bool { n, err := s.passportCount(routeID); return err == nil && n == 1 }, 90*time.Second, 200*time.Millisecond,
			"passport %s not in route_passports; ingestor log:\n%s", routeID, ing.log())
		ing.stop(t)
		require.Len(t, testenv.ReadAll(t, s.bootstrap, s.dlq), 2, "not dead-lettered again")
	})

	t.Run("dry run lists and sends nothing", func(t *testing.T) {
		t.Parallel()
		s := newStack(t, bin, 1)
		testenv.Produce(t, s.bootstrap, s.dlq,
			testenv.Record{Key: []byte("k1"), Value: []byte(`{"secret":"VALUE-ONE"}`), Headers: dlqHeaders(dlq.CategoryContract, "data.geometry")},
			testenv.Record{Key: nil, Value: []byte(`{"secret":"VALUE-TWO"}`), Headers: dlqHeaders(dlq.CategoryContract, "data.id")},
			testenv.Record{Key: []byte("k3"), Value: []byte(`{}`), Headers: dlqHeaders(dlq.CategoryFatal, "")},
		)
		out, code := s.replay(t, "--dry-run", "--category", "CONTRACT")
		require.Equal(t, 0, code, out)
		require.Contains(t, out, "dry_run=true selected=2 replayed=0 skipped=1 failed=0 scanned=3")
		require.Contains(t, out, `would-replay dlq_partition=0 dlq_offset=0 `)
		require.Contains(t, out, `original_topic="pcp.request.survey-georeference.v1" original_partition=3 original_offset=1234 original_time=2026-04-28T10:15:00Z category="CONTRACT" field="data.geometry" exception="data.geometry: ring not closed" key_bytes=2 key_sha256=6ab9f1eb value_bytes=22`)
		require.Contains(t, out, `field="data.id" exception="data.geometry: ring not closed" key=null value_bytes=22`)
		require.NotContains(t, out, "VALUE-")

		// --since seeks by the DLQ timestamps (the broker's time index).
		out, code = s.replay(t, "--dry-run", "--since", time.Now().Add(time.Hour).UTC().Format(time.RFC3339))
		require.Equal(t, 0, code, out)
		require.Contains(t, out, "selected=0 replayed=0 skipped=0 failed=0 scanned=0")
		out, code = s.replay(t, "--dry-run", "--since", time.Now().Add(-time.Hour).UTC().Format(time.RFC3339), "--until", time.Now().Add(time.Hour).UTC().Format(time.RFC3339))
		require.Equal(t, 0, code, out)
		require.Contains(t, out, "selected=3 replayed=0 skipped=0 failed=0 scanned=3")

		require.Empty(t, testenv.ReadAll(t, s.bootstrap, s.input), "a dry run sends nothing")
	})

	t.Run("selection by partition, offsets and field on the DLQ", func(t *testing.T) {
		t.Parallel()
		s := newStack(t, bin, 2)
		for p := range int32(2) {
			recs := make([]testenv.Record, 4)
			for i := range recs {
				field := "data.geometry.coordinates"
				if i == 2 {
					field = "data.properties.platform"
				}
				recs[i] = testenv.Record{
					Key:     []byte(fmt.Sprintf("p%d-%d", p, i)),
					Value:   []byte(fmt.Sprintf(`{"n":%d}`, i)),
					Headers: append([]testenv.Header{{Key: "keep", Value: []byte{byte(i)}}}, dlqHeaders(dlq.CategoryContract, field)...),
				}
			}
			testenv.ProducePartition(t, s.bootstrap, s.dlq, p, recs...)
		}
		out, code := s.replay(t, "--partition", "1", "--from-offset", "1", "--to-offset", "3", "--field-prefix", "data.geometry")
		require.Equal(t, 0, code, out)
		require.Contains(t, out, "selected=2 replayed=2 skipped=1 failed=0 scanned=3")

		in := testenv.Consume(t, s.bootstrap, s.input, 2, 30*time.Second)
		var keys []string
		for _, r := range in {
			keys = append(keys, string(r.Key))
			require.Len(t, r.Headers, 1, "only the original header")
			require.Equal(t, "keep", r.Headers[0].Key)
		}
		require.ElementsMatch(t, []string{"p1-1", "p1-3"}, keys)
	})

	t.Run("a record goes back to its original partition", func(t *testing.T) {
		t.Parallel()
		s := newStack(t, bin, 1)
		s.input = testenv.Topic(t, "input", 4)
		// Keys whose partition under the replay's own partitioner is not
		// the one the letters name; the last letter's topic is another.
		letters := []struct {
			topic     string
			partition int32
		}{{s.input, 3}, {s.input, 1}, {s.input, 2}, {s.input, 0}, {"elsewhere", 3}}
		for i, l := range letters {
			testenv.Produce(t, s.bootstrap, s.dlq, testenv.Record{
				Key: []byte(fmt.Sprintf("key-%d", i)), Value: []byte(`{}`),
				Headers: letterHeaders(l.topic, l.partition, dlq.CategoryContract, "data"),
			})
		}
		out, code := s.replay(t, "--category", "CONTRACT")
		require.Equal(t, 0, code, out)
		require.Contains(t, out, "selected=5 replayed=5")
		got := map[string]int32{}
		for _, r := range testenv.Consume(t, s.bootstrap, s.input, len(letters), 30*time.Second) {
			got[string(r.Key)] = r.Partition
		}
		for i, l := range letters[:4] {
			require.Equal(t, l.partition, got[fmt.Sprintf("key-%d", i)], "key-%d not back on its original partition: %v", i, got)
		}
		require.Contains(t, got, "key-4", "the other topic's record was not replayed: %v", got)
	})

	t.Run("bad flags and settings exit 2", func(t *testing.T) {
		t.Parallel()
		s := newStack(t, bin, 1)
		for _, args := range [][]string{
			{"--category", "POISON"},
			{"--from-offset", "5", "--to-offset", "4"},
			{"--to", s.dlq},
			{"--nope"},
			{"--partition", "7"}, // the DLQ has 1: known only after its metadata is read
		} {
			out, code := s.replay(t, args...)
			require.Equal(t, 2, code, "%v: %s", args, out)
		}
		out, code := s.run(t, []string{"TOPIC_INPUT=" + s.input}, "dlq-replay", "--dry-run")
		require.Equal(t, 2, code, out)
		require.Contains(t, out, "KAFKA_BOOTSTRAP_SERVERS")

		out, code = s.replay(t, "--help")
		require.Equal(t, 0, code, out)
		require.Contains(t, out, "usage: ingestor dlq-replay")
	})
}

const (
	routeID     = "2f1d5b1e-6c1a-4a53-9c43-1f0b5a7e9d10"
	traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
)

// bigPassport is a valid passport (contract §1) of about 2 KB: an unknown
// envelope field pads it, which the ingestor ignores.
func bigPassport(t *testing.T, id string) []byte {
	t.Helper()
	v := fmt.Sprintf(`{"type":"SURVEY_GEOREFERENCE","traceId":"7b0b3c1e9f","correlationId":"req-551","group":"pcp","source":"survey-planner",
"padding":%q,
"data":{"type":"Feature","stac_version":"1.0.0","id":"KA7-20260428-18342-R0412",
"geometry":{"type":"Polygon","coordinates":[[[37.41,55.62],[37.92,55.58],[38.05,55.91],[37.52,55.96],[37.41,55.62]]]},
"properties":{"pcp:route_name_full":"KA-7 route 0412, orbit 18342","pcp:route_name_short":"R0412","platform":"KA-7",
"pcp:platform_full":"Kondor-FKA No. 7","sat:absolute_orbit":18342,"sat:orbit_state":"Descending",
"start_datetime":"2026-04-28T13:15:00+03:00","end_datetime":"2026-04-28T13:16:30+03:00",
"pcp:roll_angles":[31.0,-24.5,7.25],"pcp:visir_angles":[12.0,18.25],"sar:resolution_range":3.0,"sar:resolution_azimuth":2.5,
"sar:polarizations":["hh","HV"],"processing:level":"L1","pcp:route_id":%q}}}`, strings.Repeat("x", 1200), id)
	require.Greater(t, len(v), 1800)
	require.Less(t, len(v), 2200)
	return []byte(v)
}

// dlqHeaders are the headers the ingestor adds to a dead-lettered record
// (dlq.Letter, the one writer of them).
func dlqHeaders(category dlq.Category, field string) []testenv.Header {
	return letterHeaders("pcp.request.survey-georeference.v1", 3, category, field)
}

// letterHeaders are dlqHeaders of a record from topic's partition.
func letterHeaders(topic string, partition int32, category dlq.Category, field string) []testenv.Header {
	orig := record.Record{
		Topic: topic, Partition: partition, Offset: 1234,
		Timestamp: time.UnixMilli(1777371300000), TimestampType: record.TimestampCreateTime,
	}
	why := dlq.Reason{FQCN: dlq.FQCNContractViolation, Message: "data.geometry: ring not closed", Category: category, Field: field}
	var hs []testenv.Header
	for _, h := range dlq.Letter("", orig, "pcp-route-processing-service", why).Headers {
		hs = append(hs, testenv.Header{Key: h.Key, Value: h.Value})
	}
	return hs
}

// buildIngestor builds cmd/ingestor (testenv.GoBuild: an ordinary build,
// as shipped; only the test binary is instrumented).
func buildIngestor(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	require.NoError(t, testenv.GoBuild(ctx, dir, "github.com/pcp/route-processing/cmd/ingestor"))
	return filepath.Join(dir, "ingestor")
}

type stack struct {
	bin       string
	bootstrap string
	dbURL     string
	input     string
	dlq       string
	outA      string
	outB      string
	group     string
}

// newStack gives a test its own topics; the DLQ has dlqPartitions partitions.
func newStack(t *testing.T, bin string, dlqPartitions int) *stack {
	t.Helper()
	s := &stack{bin: bin, bootstrap: testenv.KafkaBootstrap(t)}
	s.input = testenv.Topic(t, "input", 1)
	s.dlq = testenv.Topic(t, "dlq", dlqPartitions)
	s.outA = testenv.Topic(t, "route-in", 1)
	s.outB = testenv.Topic(t, "georef", 1)
	s.group = "group-" + s.input
	return s
}

// kafkaEnv is the part of the environment a replay needs.
func (s *stack) kafkaEnv() []string {
	return []string{
		"KAFKA_BOOTSTRAP_SERVERS=" + s.bootstrap,
		"TOPIC_INPUT=" + s.input,
		"TOPIC_INPUT_DLQ=" + s.dlq,
		"TOPIC_PROCESSED_ROUTE=" + s.outA,
		"TOPIC_ROUTE_GEOREFERENCE=" + s.outB,
		"LOG_FORMAT=json",
	}
}

// run runs the binary to completion and returns its stdout and stderr
// (together) and exit status.
func (s *stack) run(t *testing.T, env []string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.bin, args...)
	cmd.Env = append(testenv.ChildEnv(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return out.String(), 0
	case errors.As(err, &exit):
		return out.String(), exit.ExitCode()
	}
	t.Fatalf("run %v: %v\n%s", args, err, out.String())
	return "", -1
}

func (s *stack) replay(t *testing.T, args ...string) (string, int) {
	t.Helper()
	return s.run(t, s.kafkaEnv(), append([]string{"dlq-replay"}, args...)...)
}

type proc struct {
	*testenv.Process
	out *testenv.SyncBuffer
}

func (p *proc) log() string { return p.out.String() }

// stop sends SIGTERM and waits for a clean exit (contract §5: within 30 s).
func (p *proc) stop(t *testing.T) {
	t.Helper()
	if p.Exited() {
		t.Fatalf("ingestor exited early: %v\n%s", p.Err(), p.log())
	}
	require.NoError(t, p.Stop(35*time.Second), p.log())
}

func (s *stack) startIngestor(t *testing.T, extraEnv ...string) *proc {
	t.Helper()
	addr, err := testenv.FreeAddr()
	require.NoError(t, err)
	env := append(testenv.ChildEnv(), s.kafkaEnv()...)
	env = append(env,
		"DATABASE_URL="+s.dbURLFor(t),
		"KAFKA_CONSUMER_GROUP="+s.group,
		"HTTP_ADDR="+addr,
		"INGEST_BATCH_MAX_WAIT=5ms",
	)
	env = append(env, extraEnv...)
	p := &proc{out: &testenv.SyncBuffer{}}
	p.Process, err = testenv.StartProcess(testenv.ProcessSpec{Name: "ingestor", Path: s.bin, Env: env, Output: p.out})
	require.NoError(t, err)
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			t.Logf("ingestor log:\n%s", p.log())
		}
	})
	return p
}

func (s *stack) dbURLFor(t *testing.T) string {
	t.Helper()
	if s.dbURL == "" {
		s.dbURL = testenv.DatabaseURL(t)
	}
	return s.dbURL
}

// passportCount counts the route_passports rows of id. It does not use t,
// so that it may run inside require.Eventually's goroutine.
func (s *stack) passportCount(id string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.dbURL)
	if err != nil {
		return 0, err
	}
	defer conn.Close(ctx)
	var n int
	err = conn.QueryRow(ctx, `SELECT count(*) FROM route_passports WHERE route_id = $1`, id).Scan(&n)
	return n, err
}

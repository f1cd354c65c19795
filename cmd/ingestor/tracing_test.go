package main

import (
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pcp/route-processing/pkg/testenv"
)

// With OTEL_EXPORTER_OTLP_ENDPOINT set, the ingestor's spans of a passport
// whose input carries a traceparent reach a real OTLP/HTTP endpoint (flushed
// at shutdown) in the input's trace, and the outbox rows carry the
// per-record span's context. Not parallel: the OTel exporter reads the
// process environment.
func TestTracesReachAnOTLPEndpointInTheInputsTrace(t *testing.T) {
	otlp := testenv.NewOTLPReceiver(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", otlp.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "100")

	bootstrap := testenv.KafkaBootstrap(t)
	topic := testenv.Topic(t, "trace-in", 1)
	dbURL := testenv.DatabaseURL(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	env := []string{
		"DATABASE_URL=" + dbURL,
		"KAFKA_BOOTSTRAP_SERVERS=" + bootstrap,
		"HTTP_ADDR=" + addr,
		"TOPIC_INPUT=" + topic,
		"TOPIC_INPUT_DLQ=" + testenv.Topic(t, "trace-dlq", 1),
		"KAFKA_CONSUMER_GROUP=trace-test",
		"LOG_LEVEL=warn",
	}
	value, err := os.ReadFile(filepath.Join("..", "..", "testdata", "contract", "valid-polygon.json"))
	require.NoError(t, err)
	const input = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	testenv.Produce(t, bootstrap, topic, testenv.Record{Key: []byte("k"), Value: value,
		Headers: []testenv.Header{{Key: "traceparent", Value: []byte(input)}}})

	ingestor := testenv.StartMain(t, "ingestor", func(ctx context.Context) error { return run(ctx, nil, env, io.Discard, io.Discard) })

	conn, err := pgx.Connect(context.Background(), dbURL)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	var headers []string
	require.Eventually(t, func() bool {
		rows, err := conn.Query(context.Background(), "select coalesce(headers->>'traceparent', '') from route_passport_outbox")
		if err != nil {
			return false
		}
		headers, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err == nil && len(headers) == 2
	}, 60*time.Second, 100*time.Millisecond, "the passport's outbox rows are written")
	require.NoError(t, ingestor.Stop())

	names := map[string][]testenv.Span{}
	for _, sp := range otlp.Spans() {
		names[sp.Name] = append(names[sp.Name], sp)
	}
	require.Len(t, names["ingest record"], 1, "spans flushed at shutdown: %v", names)
	recSpan := names["ingest record"][0]
	rec := recSpan.SpanID
	require.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", recSpan.TraceID, "record span in the input's trace")
	require.Equal(t, "00f067aa0ba902b7", recSpan.Parent, "the input's traceparent is the record span's parent")
	require.NotEmpty(t, names["ingest batch"])
	require.NotEmpty(t, names["ingest write"])
	for _, h := range headers {
		require.Equal(t, "00-4bf92f3577b34da6a3ce929d0e0e4736-"+rec+"-01", h, "outbox traceparent is the record span")
	}
}

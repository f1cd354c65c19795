package main

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pcp/route-processing/pkg/outbox"
	"github.com/pcp/route-processing/pkg/relay/relaytest"
	"github.com/pcp/route-processing/pkg/store"
	"github.com/pcp/route-processing/pkg/testenv"
)

// TestRunRelayTracesToOTLP: with OTEL_EXPORTER_OTLP_ENDPOINT set, the relay
// exports its publish span, in the stored traceparent's trace, to a real
// OTLP/HTTP endpoint by the time it has stopped (flush on shutdown), and the
// published record's traceparent is that span. Not parallel: it sets the
// process environment, which the OTel exporter reads.
func TestRunRelayTracesToOTLP(t *testing.T) {
	const traceID, parentSpan = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
	otlp := testenv.NewOTLPReceiver(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", otlp.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")

	url := testenv.DatabaseURL(t)
	bootstrap := testenv.KafkaBootstrap(t)
	topic := testenv.Topic(t, "cmd-traces", 1)
	ctx := context.Background()
	pool, err := store.Open(ctx, url, "test")
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	env := []string{"DATABASE_URL=" + url, "KAFKA_BOOTSTRAP_SERVERS=" + bootstrap, "HTTP_ADDR=" + freeAddr(t), "LOG_LEVEL=warn"}
	relay := testenv.StartMain(t, "relay", func(ctx context.Context) error { return run(ctx, nil, env, io.Discard, io.Discard) })

	relaytest.MustInsert(t, pool, outbox.Event{Topic: topic, Headers: outbox.OrderHeaders(map[string]string{
		"type": relaytest.RouteGeoRef, "traceparent": "00-" + traceID + "-" + parentSpan + "-01"})})
	recs := testenv.Consume(t, bootstrap, topic, 1, 30*time.Second)
	tp, ok := recs[0].Header("traceparent")
	require.True(t, ok)
	require.Len(t, tp, 55)
	require.Equal(t, traceID, tp[3:35], "the output continues the input's trace")
	require.NotEqual(t, parentSpan, tp[36:52], "under a span of the relay's")

	require.NoError(t, relay.Stop())
	names := map[string]string{} // span id → name, spans of the input's trace
	for _, sp := range otlp.Spans() {
		if sp.TraceID == traceID {
			names[sp.SpanID] = sp.Name
		}
	}
	require.Equal(t, "outbox publish", names[tp[36:52]], "the publish span was exported by the time the relay stopped; got %v", names)
}

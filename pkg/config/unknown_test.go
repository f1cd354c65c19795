package config

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A variable under the service's prefixes that no binary reads is listed,
// with the variable it is probably a misspelling of; one for the other
// binary, one under another prefix and a set of known ones are not.
func TestUnknownVariables(t *testing.T) {
	t.Parallel()
	got := UnknownVariables(env(
		"OUTBOX_MAX_ATTEMPT=3",             // the ingestor and the relay read OUTBOX_MAX_ATTEMPTS
		"INGEST_BATCHSIZE=10",              // INGEST_BATCH_SIZE
		"OUTBOX_POLL_INTERVALL=50ms",       // OUTBOX_POLL_INTERVAL
		"TOPIC_NOTHING_LIKE_IT=x",          // no neighbour
		"OUTBOX_WORKERS=2",                 // the relay's
		"INGEST_BATCH_SIZE=100",            // the ingestor's
		"TOPIC_INPUT=in",                   // both
		"DATABASE_LISTEN_URL=postgres://x", // the relay's, and not a checked prefix
		"KAFKA_PORT=tcp://10.0.0.1:9092",   // a Kubernetes service link
	))
	require.Equal(t, []UnknownVariable{
		{Name: "INGEST_BATCHSIZE", Like: "INGEST_BATCH_SIZE"},
		{Name: "OUTBOX_MAX_ATTEMPT", Like: "OUTBOX_MAX_ATTEMPTS"},
		{Name: "OUTBOX_POLL_INTERVALL", Like: "OUTBOX_POLL_INTERVAL"},
		{Name: "TOPIC_NOTHING_LIKE_IT"},
	}, got)
	require.Empty(t, UnknownVariables(env()), "the required variables alone")
}

// The warning names the variable and its likely intent, never its value.
func TestWarnUnknownNamesNoValue(t *testing.T) {
	t.Parallel()
	var logs strings.Builder
	WarnUnknown(context.Background(), slog.New(slog.NewTextHandler(&logs, nil)), env("OUTBOX_MAX_ATTEMPT=S3CRET"))
	require.Contains(t, logs.String(), "variable=OUTBOX_MAX_ATTEMPT did_you_mean=OUTBOX_MAX_ATTEMPTS")
	require.NotContains(t, logs.String(), "S3CRET")
	require.Equal(t, 1, strings.Count(logs.String(), "\n"))
}

package main

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pcp/route-processing/pkg/testenv"
)

// Output topics the brokers answer without are named in a warning each at
// start, not first as rows ending FAILED minutes later.
func TestWarnsOfMissingOutputTopics(t *testing.T) {
	t.Parallel()
	// A broker that creates no topic: the shared one can create a topic
	// the relay asks about, and then there is nothing to warn of.
	bootstrap := testenv.KafkaWithoutAutoCreate(t)
	suffix := uuid.NewString()[:8]
	processed, georef := "relay-processed-missing-"+suffix, "relay-georef-missing-"+suffix
	env := []string{
		"DATABASE_URL=postgres://pcp:pw@127.0.0.1:1/db?connect_timeout=1",
		"KAFKA_BOOTSTRAP_SERVERS=" + bootstrap,
		"TOPIC_PROCESSED_ROUTE=" + processed,
		"TOPIC_ROUTE_GEOREFERENCE=" + georef,
		"HTTP_ADDR=" + freeAddr(t),
		"LOG_LEVEL=warn",
	}
	logs := &testenv.SyncBuffer{}
	relay := testenv.StartMain(t, "relay", func(ctx context.Context) error { return run(ctx, nil, env, io.Discard, logs) })

	warned := func(topic, variable string) bool {
		for _, line := range strings.Split(logs.String(), "\n") {
			if strings.Contains(line, "a topic this process writes to cannot be used") &&
				strings.Contains(line, topic) && strings.Contains(line, variable) {
				return true
			}
		}
		return false
	}
	require.Eventually(t, func() bool {
		return warned(processed, "TOPIC_PROCESSED_ROUTE") && warned(georef, "TOPIC_ROUTE_GEOREFERENCE")
	}, 30*time.Second, 50*time.Millisecond, "no warning naming each output topic; log: %s", logs)

	require.NoError(t, relay.Stop())
}

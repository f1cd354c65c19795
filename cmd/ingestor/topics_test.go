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

// A DLQ topic the brokers answer without is named in a warning at start,
// not first at the first invalid record.
func TestWarnsOfAMissingDLQTopic(t *testing.T) {
	t.Parallel()
	// A broker that creates no topic: the shared one can create a topic
	// the ingestor asks about, and then there is nothing to warn of.
	bootstrap := testenv.KafkaWithoutAutoCreate(t)
	addr, err := testenv.FreeAddr()
	require.NoError(t, err)
	dlq := "ingestor-dlq-missing-" + uuid.NewString()[:8]
	env := []string{
		"DATABASE_URL=postgres://pcp:pw@127.0.0.1:1/db?connect_timeout=1",
		"KAFKA_BOOTSTRAP_SERVERS=" + bootstrap,
		"TOPIC_INPUT=" + testenv.CreateTopic(t, bootstrap, "topics-in", 1),
		"TOPIC_INPUT_DLQ=" + dlq,
		"HTTP_ADDR=" + addr,
		"LOG_LEVEL=warn",
	}
	var stderr testenv.SyncBuffer
	ingestor := testenv.StartMain(t, "ingestor", func(ctx context.Context) error { return run(ctx, nil, env, io.Discard, &stderr) })

	warned := func() bool {
		for _, line := range strings.Split(stderr.String(), "\n") {
			if strings.Contains(line, "a topic this process writes to cannot be used") &&
				strings.Contains(line, dlq) && strings.Contains(line, "TOPIC_INPUT_DLQ") {
				return true
			}
		}
		return false
	}
	require.Eventually(t, warned, 30*time.Second, 50*time.Millisecond, "no warning naming the DLQ topic; log: %s", &stderr)

	require.NoError(t, ingestor.Stop())
}

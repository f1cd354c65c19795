package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pcp/route-processing/pkg/config"
	"github.com/pcp/route-processing/pkg/testenv"
)

// A replay that fails prints no summary a script could take for success
// (it printed "… failed=0 scanned=0" before the error, exit 2).
func TestDLQReplayFailurePrintsNoSummary(t *testing.T) {
	t.Parallel()
	env := []string{
		"KAFKA_BOOTSTRAP_SERVERS=" + testenv.KafkaBootstrap(t),
		"TOPIC_INPUT_DLQ=" + testenv.Topic(t, "replay-dlq", 1),
	}
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"dlq-replay", "--dry-run", "--partition", "7"}, env, &stdout, &stderr)
	require.Error(t, err)
	require.Equal(t, 2, config.ExitCode(err), "%v", err)
	require.Contains(t, err.Error(), "--partition")
	require.NotContains(t, stdout.String(), "failed=", "stdout: %s", stdout.String())
}

package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pcp/route-processing/pkg/store"
	"github.com/pcp/route-processing/pkg/testenv"
)

// An ingestor pointed at a database nobody migrated used to report ready,
// consume, and retry every write as a PostgreSQL outage ("relation does not
// exist") forever, nothing saying to migrate. It now consumes nothing,
// says so once, and /readyz names the fix; after `migrate` it goes on.
func TestUnmigratedDatabaseSaysToMigrate(t *testing.T) {
	t.Parallel()
	url := testenv.EmptyDatabaseURL(t)
	bootstrap := testenv.KafkaBootstrap(t)
	addr, err := testenv.FreeAddr()
	require.NoError(t, err)
	env := []string{
		"DATABASE_URL=" + url,
		"KAFKA_BOOTSTRAP_SERVERS=" + bootstrap,
		"TOPIC_INPUT=" + testenv.Topic(t, "schema-in", 1),
		"HTTP_ADDR=" + addr,
	}
	var stderr testenv.SyncBuffer
	ingestor := testenv.StartMain(t, "ingestor", func(ctx context.Context) error { return run(ctx, nil, env, io.Discard, &stderr) })
	get := func(path string) (int, string) { return httpGet(addr, path) }

	require.Eventually(t, func() bool {
		return strings.Contains(stderr.String(), "the database schema is older than this build")
	}, 20*time.Second, 50*time.Millisecond, "log: %s", &stderr)
	require.Contains(t, stderr.String(), "run `ingestor migrate`")
	// The line goes first, then the readiness it explains.
	var code int
	var body string
	require.Eventually(t, func() bool {
		code, body = get("/readyz")
		return strings.Contains(body, "schema at version 0, this build needs")
	}, 5*time.Second, 20*time.Millisecond, "/readyz: %d %s", code, body)
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, 1, strings.Count(stderr.String(), "schema is older"), "said once")

	_, err = store.MigrateURL(context.Background(), url, nil)
	require.NoError(t, err)
	require.Eventually(t, func() bool { c, _ := get("/readyz"); return c == http.StatusOK }, 20*time.Second, 50*time.Millisecond,
		"ready once migrated: %s", &stderr)

	require.NoError(t, ingestor.Stop())
}

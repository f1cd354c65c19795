package config

import (
	"os"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
)

// The defaults the README's configuration table and the chart's
// values.yaml state are the code's: setting each variable to its stated
// default changes nothing. An operator copies these values into an
// override; one that drifted from the code would change the binary it was
// meant to leave alone.
func TestIngestorDefaultsStatedMatchTheCode(t *testing.T) {
	t.Parallel()
	names := make([]string, 0, len(ingestVars))
	for _, v := range ingestVars {
		names = append(names, v.name)
	}
	requireStatedDefaults(t, LoadIngestor, names, map[string]map[string]string{
		"ingestor": {"batchSize": "INGEST_BATCH_SIZE", "batchMaxWait": "INGEST_BATCH_MAX_WAIT"},
	})
}

func TestRelayDefaultsStatedMatchTheCode(t *testing.T) {
	t.Parallel()
	names := make([]string, 0, len(relayVars))
	for _, v := range relayVars {
		names = append(names, v.name)
	}
	requireStatedDefaults(t, LoadRelay, names, map[string]map[string]string{
		"outbox": {
			"maxAttempts":    "OUTBOX_MAX_ATTEMPTS",
			"initialBackoff": "OUTBOX_INITIAL_BACKOFF",
			"maxBackoff":     "OUTBOX_MAX_BACKOFF",
			"lockTimeout":    "OUTBOX_LOCK_TIMEOUT",
		},
		"relay": {
			"batchSize":             "OUTBOX_BATCH_SIZE",
			"pollInterval":          "OUTBOX_POLL_INTERVAL",
			"retention":             "OUTBOX_RETENTION",
			"retentionInterval":     "OUTBOX_RETENTION_INTERVAL",
			"retentionBatch":        "OUTBOX_RETENTION_BATCH",
			"claimFullScanInterval": "OUTBOX_CLAIM_FULL_SCAN_INTERVAL",
			"claimWatermarkMargin":  "OUTBOX_CLAIM_WATERMARK_MARGIN",
			"reindexInterval":       "OUTBOX_REINDEX_INTERVAL",
			"reindexMinBytes":       "OUTBOX_REINDEX_MIN_BYTES",
		},
	})
}

// requireStatedDefaults loads the configuration with nothing but the
// required variables, then with each of vars set to the default the
// README's table states, and with each values.yaml key (section → key →
// variable) set to its value: every load must equal the first.
func requireStatedDefaults[C any](t *testing.T, load func([]string) (C, error), vars []string, values map[string]map[string]string) {
	t.Helper()
	want, err := load(env())
	require.NoError(t, err)

	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	for _, name := range vars {
		m := regexp.MustCompile("(?m)^\\| `" + name + "` \\| `([^`]*)` \\|").FindSubmatch(readme)
		require.NotNil(t, m, "README's table has no row with a default for %s", name)
		got, err := load(env(name + "=" + string(m[1])))
		require.NoError(t, err, "README's default of %s", name)
		require.Equal(t, want, got, "README states %s=%s, the code's default differs", name, m[1])
	}

	chart, err := os.ReadFile("../../charts/pcp-route-processing/values.yaml")
	require.NoError(t, err)
	for section, keys := range values {
		body := regexp.MustCompile(`(?ms)^` + section + `:\n(.*?)^\S`).FindSubmatch(chart)
		require.NotNil(t, body, "values.yaml has no %s section", section)
		for key, name := range keys {
			m := regexp.MustCompile(`(?m)^  ` + key + `: *([^ #\n]+)`).FindSubmatch(body[1])
			require.NotNil(t, m, "values.yaml has no %s.%s", section, key)
			got, err := load(env(name + "=" + string(m[1])))
			require.NoError(t, err, "values.yaml's %s.%s", section, key)
			require.Equal(t, want, got, "values.yaml states %s.%s=%s, the code's default differs", section, key, m[1])
		}
	}
}

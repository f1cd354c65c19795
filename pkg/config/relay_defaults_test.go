package config

import (
	"os"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
)

// The defaults the README's configuration table and the chart's
// values.yaml state for the relay are the code's (relay.Config's
// WithDefaults): setting each variable to the stated default changes
// nothing. An operator copies these values into an override; one that
// drifted from the code would change the relay it was meant to leave alone.
func TestRelayDefaultsStatedMatchTheCode(t *testing.T) {
	t.Parallel()
	want, err := LoadRelay(env())
	require.NoError(t, err)

	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	for _, name := range relayVars() {
		m := regexp.MustCompile("(?m)^\\| `" + name + "` \\| `([^`]*)` \\|").FindSubmatch(readme)
		require.NotNil(t, m, "README's table has no row with a default for %s", name)
		got, err := LoadRelay(env(name + "=" + string(m[1])))
		require.NoError(t, err, "README's default of %s", name)
		require.Equal(t, want, got, "README states %s=%s, the code's default differs", name, m[1])
	}

	values, err := os.ReadFile("../../charts/pcp-route-processing/values.yaml")
	require.NoError(t, err)
	sections := map[string]map[string]string{
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
	}
	for section, keys := range sections {
		body := regexp.MustCompile(`(?ms)^` + section + `:\n(.*?)^\S`).FindSubmatch(values)
		require.NotNil(t, body, "values.yaml has no %s section", section)
		for key, name := range keys {
			m := regexp.MustCompile(`(?m)^  ` + key + `: *([^ #\n]+)`).FindSubmatch(body[1])
			require.NotNil(t, m, "values.yaml has no %s.%s", section, key)
			got, err := LoadRelay(env(name + "=" + string(m[1])))
			require.NoError(t, err, "values.yaml's %s.%s", section, key)
			require.Equal(t, want, got, "values.yaml states %s.%s=%s, the code's default differs", section, key, m[1])
		}
	}
}

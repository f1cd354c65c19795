package config

import (
	"os"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
)

// The defaults the README's configuration table and the chart's
// values.yaml state for the ingestor are the code's (ingest.DefaultConfig):
// setting each variable to the stated default changes nothing.
func TestIngestorDefaultsStatedMatchTheCode(t *testing.T) {
	t.Parallel()
	want, err := LoadIngestor(env())
	require.NoError(t, err)

	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	for _, v := range ingestVars {
		m := regexp.MustCompile("(?m)^\\| `" + v.name + "` \\| `([^`]*)` \\|").FindSubmatch(readme)
		require.NotNil(t, m, "README's table has no row with a default for %s", v.name)
		got, err := LoadIngestor(env(v.name + "=" + string(m[1])))
		require.NoError(t, err, "README's default of %s", v.name)
		require.Equal(t, want, got, "README states %s=%s, the code's default differs", v.name, m[1])
	}

	values, err := os.ReadFile("../../charts/pcp-route-processing/values.yaml")
	require.NoError(t, err)
	ingestor := regexp.MustCompile(`(?ms)^ingestor:\n(.*?)^\S`).FindSubmatch(values)
	require.NotNil(t, ingestor, "values.yaml has no ingestor section")
	for key, name := range map[string]string{"batchSize": "INGEST_BATCH_SIZE", "batchMaxWait": "INGEST_BATCH_MAX_WAIT"} {
		m := regexp.MustCompile(`(?m)^  ` + key + `: *([^ #\n]+)`).FindSubmatch(ingestor[1])
		require.NotNil(t, m, "values.yaml has no ingestor.%s", key)
		got, err := LoadIngestor(env(name + "=" + string(m[1])))
		require.NoError(t, err, "values.yaml's ingestor.%s", key)
		require.Equal(t, want, got, "values.yaml states ingestor.%s=%s, the code's default differs", key, m[1])
	}
}

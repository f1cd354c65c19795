package contractschema_test

import (
	"os"
	"regexp"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pcp/route-processing/docs/schemas"
	"github.com/pcp/route-processing/pkg/config"
)

// TestAsyncAPIMatchesTheService ties docs/asyncapi.yaml to the code: its
// channel addresses are the default topics, its consumer group the default
// group, and it references every schema file (make lint checks the document
// itself with the AsyncAPI CLI).
func TestAsyncAPIMatchesTheService(t *testing.T) {
	doc, err := os.ReadFile("../../docs/asyncapi.yaml")
	require.NoError(t, err)
	ing, err := config.LoadIngestor([]string{"DATABASE_URL=postgres://localhost/x", "KAFKA_BOOTSTRAP_SERVERS=localhost:9092"})
	require.NoError(t, err)

	var addresses []string
	for _, m := range regexp.MustCompile(`(?m)^    address: (\S+)$`).FindAllSubmatch(doc, -1) {
		addresses = append(addresses, string(m[1]))
	}
	want := []string{ing.TopicInput, ing.TopicProcessedRoute, ing.TopicRouteGeoreference, ing.TopicInputDLQ}
	sort.Strings(want)
	sort.Strings(addresses)
	require.Equal(t, want, addresses)
	require.Regexp(t, `(?m)^          default: `+regexp.QuoteMeta(ing.ConsumerGroup)+`$`, string(doc))

	refs := map[string]bool{}
	for _, m := range regexp.MustCompile(`\$ref: '\./schemas/([^']+)'`).FindAllSubmatch(doc, -1) {
		refs[string(m[1])] = true
	}
	entries, err := schemas.FS.ReadDir(".")
	require.NoError(t, err)
	var files []string
	for _, e := range entries {
		files = append(files, e.Name())
	}
	// route-event-data is referenced by both event schemas, not directly.
	refs["route-event-data.schema.json"] = true
	var referenced []string
	for f := range refs {
		referenced = append(referenced, f)
	}
	sort.Strings(referenced)
	require.Equal(t, files, referenced, "docs/asyncapi.yaml must reference exactly the schema files")
}

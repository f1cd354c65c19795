package record

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCheckTopicName(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"pcp.route.in.v1", "a", "A_b-C.9", strings.Repeat("t", MaxTopicLen), "..."} {
		require.NoError(t, CheckTopicName(ok), ok)
	}
	for _, bad := range []string{"", ".", "..", "my topic", "a/b", "é", "a\nb", strings.Repeat("t", MaxTopicLen+1)} {
		require.Error(t, CheckTopicName(bad), bad)
	}
}

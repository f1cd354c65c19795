package outbox

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pcp/route-processing/pkg/record"
)

// A row is published with contract §2's type and eventId headers and a key
// whatever its stored headers and key hold: a row written by SQL, not by
// the ingestor, may have none, and downstream de-duplicates on eventId.
func TestRowRecord(t *testing.T) {
	t.Parallel()
	id, route := uuid.New(), uuid.New()
	row := func(key string, hs ...record.Header) Row {
		return Row{ID: id, RouteID: route, EventType: "RouteGeoRefEvent", Topic: "t", Key: key, Payload: []byte("{}"), Headers: hs}
	}
	want := []record.Header{{Key: HeaderType, Value: []byte("RouteGeoRefEvent")}, {Key: HeaderEventID, Value: []byte(id.String())}}

	for _, tc := range []struct {
		name    string
		row     Row
		key     string
		headers []record.Header
	}{
		{"as the ingestor stores it", row("k", want...), "k", want},
		{"no headers, no key (SQL)", row(""), route.String(), want},
		{"only a trace id", row("k", record.Header{Key: HeaderTraceID, Value: []byte("t-2")}), "k",
			append(append([]record.Header{}, want...), record.Header{Key: HeaderTraceID, Value: []byte("t-2")})},
		{"another type and event id stored", row("k", record.Header{Key: HeaderType, Value: []byte("X")}, record.Header{Key: HeaderEventID, Value: []byte("y")}), "k", want},
		{"others kept, after the contract's", row("k", record.Header{Key: "zz", Value: []byte("1")}), "k",
			append(append([]record.Header{}, want...), record.Header{Key: "zz", Value: []byte("1")})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := tc.row.Record()
			require.Equal(t, tc.key, string(rec.Key))
			require.Equal(t, tc.headers, rec.Headers)
			require.Equal(t, "t", rec.Topic)
			require.Equal(t, "{}", string(rec.Value))
		})
	}
}

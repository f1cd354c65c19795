package outbox

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/pcp/route-processing/pkg/record"
)

func TestOrderHeadersPutsTheContractsFirstThenTheRestByName(t *testing.T) {
	got := OrderHeaders(map[string]string{
		"zeta": "z", "traceparent": "tp", "eventId": "e", "type": "t", "alpha": "a", "correlationId": "c",
	})
	want := []record.Header{
		{Key: "type", Value: []byte("t")}, {Key: "eventId", Value: []byte("e")},
		{Key: "correlationId", Value: []byte("c")}, {Key: "traceparent", Value: []byte("tp")},
		{Key: "alpha", Value: []byte("a")}, {Key: "zeta", Value: []byte("z")},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("OrderHeaders = %v\nwant %v", got, want)
	}
	if OrderHeaders(nil) != nil {
		t.Fatal("OrderHeaders(nil) is not nil")
	}
}

func TestHeaderMapRoundTripsThroughOrderHeaders(t *testing.T) {
	m := map[string]string{"type": "t", "eventId": "e", "x-extra": "1"}
	if got := HeaderMap(OrderHeaders(m)); !reflect.DeepEqual(got, m) {
		t.Fatalf("HeaderMap(OrderHeaders(m)) = %v, want %v", got, m)
	}
}

// TestHeadersJSONReadsBackAsTheHeaders: the stored JSON decodes to the
// headers' keys and values, whatever bytes they hold, and the last of a
// repeated key wins.
func TestHeadersJSONReadsBackAsTheHeaders(t *testing.T) {
	hs := []record.Header{
		{Key: "type", Value: []byte("RouteProcessed")}, {Key: "traceparent", Value: []byte("00-4bf9\x00")},
		{Key: `q"uote\`, Value: []byte("line\nbreak\t")}, {Key: "bytes", Value: []byte{0xff, 'a'}},
		{Key: "type", Value: []byte("last")},
	}
	var got map[string]string
	if err := json.Unmarshal(HeadersJSON(hs), &got); err != nil {
		t.Fatalf("HeadersJSON = %s: %v", HeadersJSON(hs), err)
	}
	want := HeaderMap(hs)
	want["bytes"] = "\ufffda" // JSON text is UTF-8: an invalid byte is replaced
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("HeadersJSON decodes to %q, want %q", got, want)
	}
	if string(HeadersJSON(nil)) != "{}" {
		t.Fatalf("HeadersJSON(nil) = %s", HeadersJSON(nil))
	}
}

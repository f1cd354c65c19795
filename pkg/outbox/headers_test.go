package outbox

import (
	"encoding/json"
	"reflect"
	"testing"
	"unicode/utf8"

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
	if got := headerMap(OrderHeaders(m)); !reflect.DeepEqual(got, m) {
		t.Fatalf("headerMap(OrderHeaders(m)) = %v, want %v", got, m)
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
	if b := HeadersJSON(hs); !utf8.Valid(b) {
		t.Fatalf("HeadersJSON = %q: not valid UTF-8, which jsonb refuses", b)
	}
	var got map[string]string
	if err := json.Unmarshal(HeadersJSON(hs), &got); err != nil {
		t.Fatalf("HeadersJSON = %s: %v", HeadersJSON(hs), err)
	}
	want := headerMap(hs)
	want["bytes"] = "\ufffda" // JSON text is UTF-8: an invalid byte is replaced
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("HeadersJSON decodes to %q, want %q", got, want)
	}
	if string(HeadersJSON(nil)) != "{}" {
		t.Fatalf("HeadersJSON(nil) = %s", HeadersJSON(nil))
	}
}

// FuzzParseHeadersJSON: the stored headers read back exactly as
// encoding/json reads them (then put in publication order), and fail
// where it fails. The seeds run in every `go test`.
func FuzzParseHeadersJSON(f *testing.F) {
	for _, s := range []string{
		`{"type": "RouteProcessed", "eventId": "3f0c9d5e-1c1e-4f7a-9a51-2f0d1c7b8e11", "traceId": "t-1", "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}`,
		`{}`, ` { } `, `{"a":"b"}`, `{"a":"b","a":"c"}`, `{"x-extra": "кириллица 🛰"}`,
		`{"q": "a \"quoted\" \\ value"}`, `{"c": "line\nbreak \u0001 \u00e9 \ud83d\ude80"}`,
		`{"a": 1}`, `{"a": null}`, `{"a": {"b": "c"}}`, `["a"]`, `null`, `"a"`, ``, `{`, `{"a":"b",}`,
		`{"a":"b"} x`, `{"a" "b"}`, "{\"a\":\"\xff\"}", "{\"a\":\"tab\there\"}", `{"a":"b"`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := ParseHeadersJSON(b)
		var m map[string]string
		werr := json.Unmarshal(b, &m)
		if (err == nil) != (werr == nil) {
			t.Fatalf("%q: error %v, encoding/json's %v", b, err, werr)
		}
		if err == nil && !reflect.DeepEqual(got, OrderHeaders(m)) {
			t.Fatalf("%q: %q, encoding/json's %q", b, got, OrderHeaders(m))
		}
	})
}

// headerMap is headers as an object, as they read back from the stored
// JSON: a key given twice keeps its last value.
func headerMap(hs []record.Header) map[string]string {
	m := make(map[string]string, len(hs))
	for _, h := range hs {
		m[h.Key] = string(h.Value)
	}
	return m
}

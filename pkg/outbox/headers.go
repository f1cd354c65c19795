package outbox

import (
	"encoding/json"
	"slices"
	"sort"

	"github.com/pcp/route-processing/pkg/jsontext"
	"github.com/pcp/route-processing/pkg/record"
)

// The headers of contract §2 on an output record. HeaderTraceparent, the
// W3C Trace Context header, is also the one the input may carry (the
// tracing package reads and writes it by this name).
const (
	HeaderType          = "type"
	HeaderEventID       = "eventId"
	HeaderTraceID       = "traceId"
	HeaderCorrelationID = "correlationId"
	HeaderTraceparent   = "traceparent"
)

// headerOrder is the order of contract §2's headers on an output record.
var headerOrder = []string{HeaderType, HeaderEventID, HeaderTraceID, HeaderCorrelationID, HeaderTraceparent}

// OrderHeaders turns stored headers (a JSON object, whose key order
// PostgreSQL's jsonb does not keep) into record headers in publication
// order: the contract's headers first, in the contract's order, then any
// others sorted by name. It is the one home of that order: the writer uses
// it to build an Event, the store to decode a claimed Row.
func OrderHeaders(m map[string]string) []record.Header {
	if len(m) == 0 {
		return nil
	}
	out := make([]record.Header, 0, len(m))
	for _, k := range headerOrder {
		if v, ok := m[k]; ok {
			out = append(out, record.Header{Key: k, Value: []byte(v)})
		}
	}
	var extra []string
	for k := range m {
		if !slices.Contains(headerOrder, k) {
			extra = append(extra, k)
		}
	}
	sort.Strings(extra)
	for _, k := range extra {
		out = append(out, record.Header{Key: k, Value: []byte(m[k])})
	}
	return out
}

// HeadersJSON is the stored form of headers (route_passport_outbox.headers,
// jsonb): a JSON object of their keys and values. A key given twice keeps
// its last value, as jsonb keeps it.
func HeadersJSON(hs []record.Header) []byte {
	n := 2
	for _, h := range hs {
		n += len(h.Key) + len(h.Value) + 6
	}
	b := append(make([]byte, 0, n), '{')
	for i, h := range hs {
		if i > 0 {
			b = append(b, ',')
		}
		b = jsontext.AppendString(b, h.Key)
		b = append(b, ':')
		b = jsontext.AppendString(b, string(h.Value))
	}
	return append(b, '}')
}

// ParseHeadersJSON reads stored headers (as PostgreSQL prints the jsonb of
// [HeadersJSON]) back into record headers in publication order
// ([OrderHeaders]). It fails when they are not a JSON object of strings.
func ParseHeadersJSON(b []byte) ([]record.Header, error) {
	m, ok := jsontext.PlainStringObject(b)
	if !ok {
		// Escapes, or not an object of strings: encoding/json reads the
		// first and names what is wrong with the second.
		if err := json.Unmarshal(b, &m); err != nil {
			return nil, err
		}
	}
	return OrderHeaders(m), nil
}

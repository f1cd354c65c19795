package contractschema

import (
	"bytes"
	"fmt"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/pcp/route-processing/pkg/record"
)

// ValidateOutputRecord checks one published output record against contract
// §2 as a whole: the headers against output-headers.schema.json, the value
// against the schema of its event type, and the rules that tie them
// together, which no single schema can see: the type header names the
// value's type, the traceId and correlationId headers are the value's when
// those are non-empty (and absent otherwise), and the key is the traceId or
// the routeId. The topic is not checked: it is configurable.
func (v *Validator) ValidateOutputRecord(rec record.Record) error {
	hs, err := outputHeaderDoc(rec.Headers)
	if err != nil {
		return err
	}
	if err := v.ValidateValue(OutputHeaders, hs); err != nil {
		return err
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(rec.Value))
	if err != nil {
		return fmt.Errorf("validate output record: value is not JSON: %w", err)
	}
	val, _ := inst.(map[string]any)
	typ, _ := val["type"].(string)
	if typ != hs["type"] {
		return fmt.Errorf("validate output record: type header %q differs from the value's type %q", hs["type"], typ)
	}
	schema := EventSchema(typ)
	if schema == "" {
		return fmt.Errorf("validate output record: type %q is not an output event type of the contract", typ)
	}
	if err := v.ValidateValue(schema, inst); err != nil {
		return err
	}
	for _, name := range []string{"traceId", "correlationId"} {
		want, _ := val[name].(string) // null: ""
		got, present := hs[name]
		switch {
		case want == "" && present:
			return fmt.Errorf("validate output record: header %s is present but the value's %s is empty or null", name, name)
		case want != "" && got != want:
			return fmt.Errorf("validate output record: header %s must equal the value's %s", name, name)
		}
	}
	routeID, _ := val["data"].(map[string]any)["routeId"].(string)
	traceID, _ := val["traceId"].(string)
	key := string(rec.Key)
	if rec.Key == nil || (key != routeID && (traceID == "" || key != traceID)) {
		return fmt.Errorf("validate output record: key must be the traceId or, when that is missing or empty, the routeId")
	}
	return nil
}

// outputHeaderDoc turns record headers into the JSON object the headers
// schema describes. Output headers are UTF-8 text and occur once each.
func outputHeaderDoc(hs []record.Header) (map[string]any, error) {
	doc := make(map[string]any, len(hs))
	for _, h := range hs {
		if _, dup := doc[h.Key]; dup {
			return nil, fmt.Errorf("validate output record: header %s occurs more than once", h.Key)
		}
		if !utf8.Valid(h.Value) {
			return nil, fmt.Errorf("validate output record: header %s is not UTF-8", h.Key)
		}
		doc[h.Key] = string(h.Value)
	}
	return doc, nil
}

// HeaderLike is any header type laid out as record.Header (Key string, Value
// []byte): testenv.Header or record.Header. It lets tests that
// read records with their own types validate them in one call.
type HeaderLike interface {
	~struct {
		Key   string
		Value []byte
	}
}

// RecordHeaders converts headers of any [HeaderLike] type, in order.
func RecordHeaders[H HeaderLike](hs []H) []record.Header {
	out := make([]record.Header, len(hs))
	for i, h := range hs {
		out[i] = record.Header(h)
	}
	return out
}

// ValidateOutput is [Validator.ValidateOutputRecord] for a record given as
// key, value and headers of any [HeaderLike] type, e.g.
// contractschema.ValidateOutput(v, r.Key, r.Value, r.Headers) for a
// testenv.Record r.
func ValidateOutput[H HeaderLike](v *Validator, key, value []byte, headers []H) error {
	return v.ValidateOutputRecord(record.Record{Key: key, Value: value, Headers: RecordHeaders(headers)})
}

// ValidateDLQ is [Validator.ValidateDLQHeaders] for headers of any
// [HeaderLike] type.
func ValidateDLQ[H HeaderLike](v *Validator, headers []H) error {
	return v.ValidateDLQHeaders(RecordHeaders(headers))
}

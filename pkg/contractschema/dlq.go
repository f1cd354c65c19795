package contractschema

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/pcp/route-processing/pkg/record"
)

// Wire encodings of DLQ headers, as dlq-headers.schema.json annotates them
// (x-kafka-header-encoding). The schema is their one home: downstream
// decoders read the same annotation.
const (
	encodingUTF8  = "utf-8"
	encodingInt32 = "int32-big-endian"
	encodingInt64 = "int64-big-endian"
)

// headerEncodings reads x-kafka-header-encoding of each property of the
// DLQ headers schema.
func headerEncodings(doc any) (map[string]string, error) {
	obj, _ := doc.(map[string]any)
	props, _ := obj["properties"].(map[string]any)
	if len(props) == 0 {
		return nil, fmt.Errorf("schema %s: no properties", DLQHeaders)
	}
	enc := make(map[string]string, len(props))
	for name, p := range props {
		e, _ := p.(map[string]any)["x-kafka-header-encoding"].(string)
		switch e {
		case encodingUTF8, encodingInt32, encodingInt64:
		default:
			return nil, fmt.Errorf("schema %s: header %s: unknown x-kafka-header-encoding %q", DLQHeaders, name, e)
		}
		enc[name] = e
	}
	return enc, nil
}

// DecodeDLQHeaders turns the headers of a DLQ record into the JSON object
// dlq-headers.schema.json describes: the binary Spring headers as integers
// (json.Number), the others as text. When a name occurs more than once the
// last one wins, as Kafka's lastHeader and pkg/dlqreplay read them. A binary
// header of the wrong length, or a DLQ text header that is not UTF-8, is an
// error: no schema can describe bytes. The original record's own headers
// are kept as text, whatever their bytes.
func (v *Validator) DecodeDLQHeaders(hs []record.Header) (map[string]any, error) {
	doc := make(map[string]any, len(hs))
	for _, h := range hs {
		switch v.dlqEncodings[h.Key] {
		case encodingInt32:
			if len(h.Value) != 4 {
				return nil, fmt.Errorf("decode DLQ header %s: %d bytes, want a 4-byte big-endian int", h.Key, len(h.Value))
			}
			doc[h.Key] = json.Number(strconv.FormatInt(int64(int32(binary.BigEndian.Uint32(h.Value))), 10))
		case encodingInt64:
			if len(h.Value) != 8 {
				return nil, fmt.Errorf("decode DLQ header %s: %d bytes, want an 8-byte big-endian long", h.Key, len(h.Value))
			}
			doc[h.Key] = json.Number(strconv.FormatInt(int64(binary.BigEndian.Uint64(h.Value)), 10))
		case encodingUTF8:
			if !utf8.Valid(h.Value) {
				return nil, fmt.Errorf("decode DLQ header %s: not UTF-8", h.Key)
			}
			doc[h.Key] = string(h.Value)
		default:
			doc[h.Key] = string(h.Value)
		}
	}
	return doc, nil
}

// ValidateDLQHeaders decodes the headers of a DLQ record and validates them
// against dlq-headers.schema.json.
func (v *Validator) ValidateDLQHeaders(hs []record.Header) error {
	doc, err := v.DecodeDLQHeaders(hs)
	if err != nil {
		return err
	}
	return v.ValidateValue(DLQHeaders, doc)
}

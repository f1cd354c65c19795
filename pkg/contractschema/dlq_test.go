package contractschema_test

import (
	"encoding/binary"
	"encoding/json"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pcp/route-processing/docs/schemas"
	"github.com/pcp/route-processing/pkg/contractschema"
	"github.com/pcp/route-processing/pkg/dlq"
	"github.com/pcp/route-processing/pkg/passport"
	"github.com/pcp/route-processing/pkg/record"
)

// dlqHeaders builds the DLQ headers of contract §4 for a contract error, as
// Spring's recoverer (and ingest) encode them, after the original record's
// own headers.
func dlqHeaders(category, field, message string) []record.Header {
	hs := []record.Header{
		{Key: "traceparent", Value: []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")},
		{Key: "binary-original", Value: []byte{0xff, 0x00}},
		{Key: dlq.HeaderOriginalTopic, Value: []byte("pcp.request.survey-georeference.v1")},
		{Key: dlq.HeaderOriginalPartition, Value: binary.BigEndian.AppendUint32(nil, 3)},
		{Key: dlq.HeaderOriginalOffset, Value: binary.BigEndian.AppendUint64(nil, 1<<40)},
		{Key: dlq.HeaderOriginalTimestamp, Value: binary.BigEndian.AppendUint64(nil, 1777371300000)},
		{Key: dlq.HeaderOriginalTimestampType, Value: []byte(record.TimestampCreateTime)},
		{Key: dlq.HeaderOriginalGroup, Value: []byte("pcp-route-processing-service")},
		{Key: dlq.HeaderExceptionFQCN, Value: []byte(dlq.FQCNContractViolation)},
		{Key: dlq.HeaderExceptionMessage, Value: []byte(message)},
		{Key: dlq.HeaderErrorCategory, Value: []byte(category)},
	}
	if field != "" {
		hs = append(hs, record.Header{Key: dlq.HeaderErrorField, Value: []byte(field)})
	}
	return hs
}

// TestExpectedDLQHeadersPassTheSchema: for every invalid example, the
// headers its DLQ copy carries (category and field as expected-dlq.json
// says, message from the parser) satisfy the DLQ headers schema.
func TestExpectedDLQHeadersPassTheSchema(t *testing.T) {
	v := newValidator(t)
	var dlq map[string]expectedDLQ
	readJSON(t, "expected-dlq.json", &dlq)
	require.Len(t, dlq, len(examples(t, "invalid-")))
	for name, want := range dlq {
		t.Run(name, func(t *testing.T) {
			_, err := passport.Parse(readFile(t, name), passport.DefaultLimits())
			var ce *passport.ContractError
			require.ErrorAs(t, err, &ce)
			field := ""
			if want.Field != nil {
				require.Contains(t, ce.Field, *want.Field)
				field = ce.Field
			}
			require.NoError(t, v.ValidateDLQHeaders(dlqHeaders(want.Category, field, ce.Reason)))
		})
	}
}

func TestDLQHeadersRefused(t *testing.T) {
	v := newValidator(t)
	good := func() []record.Header { return dlqHeaders("CONTRACT", "data.geometry", "data.geometry: not valid") }
	set := func(hs []record.Header, key string, value []byte) []record.Header {
		// Appended: the last occurrence wins.
		return append(hs, record.Header{Key: key, Value: value})
	}
	drop := func(hs []record.Header, key string) []record.Header {
		var out []record.Header
		for _, h := range hs {
			if h.Key != key {
				out = append(out, h)
			}
		}
		return out
	}
	require.NoError(t, v.ValidateDLQHeaders(good()))
	require.NoError(t, v.ValidateDLQHeaders(set(good(), dlq.HeaderOriginalTimestamp, binary.BigEndian.AppendUint64(nil, ^uint64(0)))),
		"-1: no timestamp")
	require.NoError(t, v.ValidateDLQHeaders(drop(good(), dlq.HeaderErrorField)), "the field is optional")
	cases := map[string][]record.Header{
		"category unknown":          set(good(), dlq.HeaderErrorCategory, []byte("BOGUS")),
		"partition of 8 bytes":      set(good(), dlq.HeaderOriginalPartition, binary.BigEndian.AppendUint64(nil, 3)),
		"partition negative":        set(good(), dlq.HeaderOriginalPartition, binary.BigEndian.AppendUint32(nil, ^uint32(0))),
		"offset as text":            set(good(), dlq.HeaderOriginalOffset, []byte("12345678")[:7]),
		"timestamp -2":              set(good(), dlq.HeaderOriginalTimestamp, binary.BigEndian.AppendUint64(nil, ^uint64(1))),
		"timestamp type unknown":    set(good(), dlq.HeaderOriginalTimestampType, []byte("Now")),
		"topic missing":             drop(good(), dlq.HeaderOriginalTopic),
		"message empty":             set(good(), dlq.HeaderExceptionMessage, nil),
		"fqcn not UTF-8":            set(good(), dlq.HeaderExceptionFQCN, []byte{0xff}),
		"field empty":               set(good(), dlq.HeaderErrorField, nil),
		"consumer group missing":    drop(good(), dlq.HeaderOriginalGroup),
		"category missing":          drop(good(), dlq.HeaderErrorCategory),
		"exception message missing": drop(good(), dlq.HeaderExceptionMessage),
	}
	for name, hs := range cases {
		t.Run(name, func(t *testing.T) {
			require.Error(t, v.ValidateDLQHeaders(hs))
		})
	}
}

// TestDLQSchemaNamesIngestsHeaders: the schema lists exactly the headers
// ingest writes (its constants are their one home in the code).
func TestDLQSchemaNamesIngestsHeaders(t *testing.T) {
	b, err := schemas.FS.ReadFile(contractschema.DLQHeaders)
	require.NoError(t, err)
	var doc struct {
		Required   []string                   `json:"required"`
		Properties map[string]json.RawMessage `json:"properties"`
	}
	require.NoError(t, json.Unmarshal(b, &doc))
	var names []string
	for k := range doc.Properties {
		names = append(names, k)
	}
	sort.Strings(names)
	want := []string{
		dlq.HeaderOriginalTopic, dlq.HeaderOriginalPartition, dlq.HeaderOriginalOffset,
		dlq.HeaderOriginalTimestamp, dlq.HeaderOriginalTimestampType, dlq.HeaderOriginalGroup,
		dlq.HeaderExceptionFQCN, dlq.HeaderExceptionMessage, dlq.HeaderErrorCategory, dlq.HeaderErrorField,
		dlq.HeaderValueOmitted, dlq.HeaderKeyOmitted, dlq.HeaderHeadersOmitted,
	}
	sort.Strings(want)
	require.Equal(t, want, names)
	optional := []string{dlq.HeaderErrorField, dlq.HeaderValueOmitted, dlq.HeaderKeyOmitted, dlq.HeaderHeadersOmitted}
	for _, name := range optional {
		require.NotContains(t, doc.Required, name)
	}
	require.Len(t, doc.Required, len(want)-len(optional))
}

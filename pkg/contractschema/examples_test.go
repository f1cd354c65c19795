package contractschema_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pcp/route-processing/pkg/contractschema"
	"github.com/pcp/route-processing/pkg/passport"
	"github.com/pcp/route-processing/pkg/record"
)

// contractDir holds the contract's examples (copied from the shared
// contract).
const contractDir = "../../testdata/contract"

// notSchemaExpressible lists the invalid examples whose broken rule JSON
// Schema cannot express; they pass the schema and only the parser refuses
// them. Every other invalid example must fail the schema.
var notSchemaExpressible = map[string]string{
	"invalid-interval.json":          "end_datetime before start_datetime: an order between two values",
	"invalid-self-intersecting.json": "self-intersecting ring: OGC validity",
}

type expectedOutput struct {
	Key           string          `json:"key"`
	Data          json.RawMessage `json:"data"`
	TraceID       *string         `json:"traceId"`
	CorrelationID *string         `json:"correlationId"`
}

type expectedDLQ struct {
	Category string  `json:"category"`
	Field    *string `json:"field"`
}

func newValidator(t *testing.T) *contractschema.Validator {
	t.Helper()
	v, err := contractschema.New()
	require.NoError(t, err)
	return v
}

func readFile(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(contractDir, name))
	require.NoError(t, err)
	return b
}

func readJSON(t *testing.T, name string, v any) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(readFile(t, name)))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(v))
}

// examples returns the input example file names with the given prefix; it
// fails when there are none, so a moved directory cannot pass silently.
func examples(t *testing.T, prefix string) []string {
	t.Helper()
	entries, err := os.ReadDir(contractDir)
	require.NoError(t, err)
	var out []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), prefix) {
			out = append(out, e.Name())
		}
	}
	require.NotEmpty(t, out, "no %s* examples in %s", prefix, contractDir)
	return out
}

func TestValidExamplesPassTheInputSchema(t *testing.T) {
	v := newValidator(t)
	for _, name := range examples(t, "valid-") {
		t.Run(name, func(t *testing.T) {
			require.NoError(t, v.Validate(contractschema.Envelope, readFile(t, name)))
		})
	}
}

func TestInvalidExamples(t *testing.T) {
	v := newValidator(t)
	var dlq map[string]expectedDLQ
	readJSON(t, "expected-dlq.json", &dlq)
	for _, name := range examples(t, "invalid-") {
		t.Run(name, func(t *testing.T) {
			value := readFile(t, name)
			_, perr := passport.Parse(value, passport.DefaultLimits())
			require.Error(t, perr, "the parser must refuse every invalid example")
			serr := v.Validate(contractschema.Envelope, value)
			if why, ok := notSchemaExpressible[name]; ok {
				require.NoError(t, serr, "%s breaks a rule the schema cannot express (%s), so it must pass the schema", name, why)
				return
			}
			require.Error(t, serr, "%s breaks a schema-expressible rule", name)
			want, ok := dlq[name]
			require.True(t, ok, "%s has no entry in expected-dlq.json", name)
			if want.Field == nil {
				// Not JSON at all: the validator refuses it before any schema.
				require.Contains(t, serr.Error(), "not JSON")
			}
		})
	}
	for name := range notSchemaExpressible {
		require.FileExists(t, filepath.Join(contractDir, name), "stale entry in notSchemaExpressible")
	}
}

// eventDoc builds an output event value from an expected-outputs entry, as
// the contract's examples describe it (type per topic, fixed group and
// source).
func eventDoc(t *testing.T, typ string, want expectedOutput) []byte {
	t.Helper()
	b, err := json.Marshal(map[string]any{
		"type":          typ,
		"data":          want.Data,
		"traceId":       want.TraceID,
		"correlationId": want.CorrelationID,
		"group":         passport.OutputGroup,
		"source":        passport.OutputSource,
	})
	require.NoError(t, err)
	return b
}

var eventTypes = []string{passport.EventModeStatusChanged, passport.EventRouteGeoRef}

func TestExpectedOutputsPassTheEventSchemas(t *testing.T) {
	v := newValidator(t)
	var outputs map[string]expectedOutput
	readJSON(t, "expected-outputs.json", &outputs)
	require.Len(t, outputs, len(examples(t, "valid-")))
	for name, want := range outputs {
		for _, typ := range eventTypes {
			t.Run(name+"/"+typ, func(t *testing.T) {
				doc := eventDoc(t, typ, want)
				require.NoError(t, v.Validate(contractschema.EventSchema(typ), doc))
				require.NoError(t, v.ValidateEvent(doc))
			})
		}
	}
}

// TestPayloadsPassTheEventSchemas validates the documents pkg/passport
// really freezes into the outbox, for every valid example, as whole output
// records (headers as the outbox writes them, key in both modes).
func TestPayloadsPassTheEventSchemas(t *testing.T) {
	v := newValidator(t)
	for _, name := range examples(t, "valid-") {
		p, err := passport.Parse(readFile(t, name), passport.DefaultLimits())
		require.NoError(t, err, name)
		for _, typ := range eventTypes {
			t.Run(name+"/"+typ, func(t *testing.T) {
				value := p.Payload(typ)
				require.NoError(t, v.Validate(contractschema.EventSchema(typ), value))
				require.NoError(t, v.ValidateEvent(value))
				for _, mode := range []string{passport.KeyTraceID, passport.KeyRouteID} {
					rec := outputRecord(p, typ, mode)
					require.NoError(t, v.ValidateOutputRecord(rec), "key mode %s", mode)
				}
			})
		}
	}
}

// outputRecord builds the record the relay would publish for p's event of
// type typ, from the events the ingestor stores (passport's Events, the one
// home of the header rules), as if the input had carried a traceparent.
func outputRecord(p *passport.Passport, typ, keyMode string) record.Record {
	traceparent := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	cfg := passport.EventConfig{
		TopicProcessedRoute:    "pcp.route.in.v1",
		TopicRouteGeoreference: "pcp.route.georeference.v1",
		MessageKey:             keyMode,
	}
	for _, ev := range p.Events(cfg, &traceparent) {
		if ev.Type == typ {
			return record.Record{Topic: ev.Topic, Key: []byte(ev.Key), Value: ev.Payload, Headers: ev.Headers}
		}
	}
	panic("no event of type " + typ)
}

// TestEventTypeNames ties the schema names to pkg/passport's event types.
func TestEventTypeNames(t *testing.T) {
	require.Equal(t, contractschema.ModeStatusChangedEvent, contractschema.EventSchema(passport.EventModeStatusChanged))
	require.Equal(t, contractschema.RouteGeoRefEvent, contractschema.EventSchema(passport.EventRouteGeoRef))
	require.Empty(t, contractschema.EventSchema("RouteDeletedEvent"))
}

package passport_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/peterstace/simplefeatures/geom"
	"github.com/stretchr/testify/require"

	"github.com/pcp/route-processing/pkg/passport"
)

// contractDir is the one home of the contract's examples (a copy of
// /work/shared/contract/examples, kept identical).
const contractDir = "../../testdata/contract"

type expectedOutput struct {
	Key           string                     `json:"key"`
	Data          map[string]json.RawMessage `json:"data"`
	TraceID       *string                    `json:"traceId"`
	CorrelationID *string                    `json:"correlationId"`
}

type expectedDLQ struct {
	Category string  `json:"category"`
	Field    *string `json:"field"`
}

func readJSON(t *testing.T, name string, v any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(contractDir, name))
	require.NoError(t, err)
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(v))
}

// TestContractExamples runs every file of testdata/contract, so that an
// example added without an expectation (or the reverse) fails.
func TestContractExamples(t *testing.T) {
	t.Parallel()
	var outputs map[string]expectedOutput
	var dlq map[string]expectedDLQ
	readJSON(t, "expected-outputs.json", &outputs)
	readJSON(t, "expected-dlq.json", &dlq)

	entries, err := os.ReadDir(contractDir)
	require.NoError(t, err)
	seen := map[string]bool{}
	for _, e := range entries {
		name := e.Name()
		switch {
		case name == "README.md", strings.HasPrefix(name, "expected-"):
			continue
		case strings.HasPrefix(name, "valid-"):
			want, ok := outputs[name]
			require.True(t, ok, "%s has no entry in expected-outputs.json", name)
			seen[name] = true
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				checkValidExample(t, name, want)
			})
		case strings.HasPrefix(name, "invalid-"):
			want, ok := dlq[name]
			require.True(t, ok, "%s has no entry in expected-dlq.json", name)
			seen[name] = true
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				value, err := os.ReadFile(filepath.Join(contractDir, name))
				require.NoError(t, err)
				p, err := passport.Parse(value, passport.DefaultLimits())
				require.Nil(t, p)
				ce := contractErr(t, err)
				require.Equal(t, "CONTRACT", want.Category)
				require.Equal(t, "CONTRACT", string(ce.Category()))
				if want.Field == nil {
					require.Empty(t, ce.Field, "reason: %s", ce.Reason)
				} else {
					require.True(t, strings.HasPrefix(ce.Field, *want.Field),
						"field %q does not start with %q (reason: %s)", ce.Field, *want.Field, ce.Reason)
				}
				require.NotEmpty(t, ce.Reason)
				require.Contains(t, ce.Error(), ce.Field)
			})
		default:
			t.Errorf("%s: example files must be named valid-* or invalid-*", name)
		}
	}
	for name := range outputs {
		require.True(t, seen[name], "expected-outputs.json names %s, which does not exist", name)
	}
	for name := range dlq {
		require.True(t, seen[name], "expected-dlq.json names %s, which does not exist", name)
	}
}

func checkValidExample(t *testing.T, name string, want expectedOutput) {
	value, err := os.ReadFile(filepath.Join(contractDir, name))
	require.NoError(t, err)
	p, err := passport.Parse(value, passport.DefaultLimits())
	require.NoError(t, err)
	checkInvariants(t, p)
	require.Equal(t, want.Key, p.MessageKey(passport.KeyTraceID))
	require.Equal(t, want.TraceID, p.TraceID)
	require.Equal(t, want.CorrelationID, p.CorrelationID)

	for _, typ := range []string{passport.EventModeStatusChanged, passport.EventRouteGeoRef} {
		payload := p.Payload(typ)
		var got struct {
			Type          string                     `json:"type"`
			Data          map[string]json.RawMessage `json:"data"`
			TraceID       *string                    `json:"traceId"`
			CorrelationID *string                    `json:"correlationId"`
			Group         string                     `json:"group"`
			Source        string                     `json:"source"`
		}
		dec := json.NewDecoder(bytes.NewReader(payload))
		dec.DisallowUnknownFields()
		require.NoError(t, dec.Decode(&got), "%s", payload)
		require.Equal(t, typ, got.Type)
		require.Equal(t, "pcp", got.Group)
		require.Equal(t, "route-processing", got.Source)
		require.Equal(t, want.TraceID, got.TraceID)
		require.Equal(t, want.CorrelationID, got.CorrelationID)
		requireSameData(t, want.Data, got.Data)
		require.Equal(t, dataKeyOrder(t, payload), []string{
			"routeId", "routeNameFull", "routeNameShort", "kaShort", "kaFull",
			"orbitNumber", "orbitState", "intervalBegin", "intervalEnd",
			"rollAngle", "visirAngle", "resolutionRange", "resolutionAzimuth",
			"polarisation", "processingLevel", "geometry", "routeStatus",
		}, "data members must be in the order of the contract's example")
	}
}

// requireSameData compares geometry as geometry and numbers as numbers, as
// the contract examples' README asks.
func requireSameData(t *testing.T, want, got map[string]json.RawMessage) {
	t.Helper()
	require.ElementsMatch(t, keys(want), keys(got))
	for k, w := range want {
		g := got[k]
		switch k {
		case "geometry":
			var ws, gs string
			require.NoError(t, json.Unmarshal(w, &ws))
			require.NoError(t, json.Unmarshal(g, &gs))
			wg, err := geom.UnmarshalWKT(ws)
			require.NoError(t, err)
			gg, err := geom.UnmarshalWKT(gs)
			require.NoError(t, err)
			require.True(t, geom.ExactEquals(wg, gg), "geometry: want %s, got %s", ws, gs)
		case "orbitNumber":
			require.Regexp(t, `^-?[0-9]+$`, string(g), "orbitNumber must be an integer literal")
			require.JSONEq(t, string(w), string(g))
		default:
			// JSONEq decodes numbers to float64, so 31.0 equals 31.
			require.JSONEq(t, string(w), string(g), "data.%s", k)
		}
	}
}

func keys(m map[string]json.RawMessage) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// dataKeyOrder lists the member names of "data" in document order.
func dataKeyOrder(t *testing.T, payload []byte) []string {
	t.Helper()
	var top struct {
		Data json.RawMessage `json:"data"`
	}
	require.NoError(t, json.Unmarshal(payload, &top))
	dec := json.NewDecoder(bytes.NewReader(top.Data))
	tok, err := dec.Token()
	require.NoError(t, err)
	require.Equal(t, json.Delim('{'), tok)
	var out []string
	for dec.More() {
		tok, err := dec.Token()
		require.NoError(t, err)
		out = append(out, tok.(string))
		var skip json.RawMessage
		require.NoError(t, dec.Decode(&skip))
	}
	return out
}

package contractschema_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pcp/route-processing/pkg/contractschema"
	"github.com/pcp/route-processing/pkg/passport"
	"github.com/pcp/route-processing/pkg/record"
	"github.com/pcp/route-processing/pkg/testenv"
)

// payloadDoc returns pkg/passport's RouteGeoRefEvent for valid-polygon.json,
// decoded, for a test to break.
func payloadDoc(t *testing.T) (*passport.Passport, map[string]any) {
	t.Helper()
	p, err := passport.Parse(readFile(t, "valid-polygon.json"), passport.DefaultLimits())
	require.NoError(t, err)
	var doc map[string]any
	require.NoError(t, json.Unmarshal(p.Payload(passport.EventRouteGeoRef), &doc))
	return p, doc
}

// TestEventSchemasRefuse checks that the output schemas are strict enough
// to catch a regression in the payload code.
func TestEventSchemasRefuse(t *testing.T) {
	v := newValidator(t)
	cases := map[string]func(doc, data map[string]any){
		"routeId upper case":         func(_, d map[string]any) { d["routeId"] = strings.ToUpper(d["routeId"].(string)) },
		"routeId missing":            func(_, d map[string]any) { delete(d, "routeId") },
		"time with an offset":        func(_, d map[string]any) { d["intervalBegin"] = "2026-04-28T13:15:00+03:00" },
		"time with a trailing zero":  func(_, d map[string]any) { d["intervalEnd"] = "2026-04-28T10:16:30.50Z" },
		"time not a date-time":       func(_, d map[string]any) { d["intervalEnd"] = "yesterday" },
		"orbitState upper case":      func(_, d map[string]any) { d["orbitState"] = "DESCENDING" },
		"polarisation lower case":    func(_, d map[string]any) { d["polarisation"] = []any{"hh"} },
		"polarisation twice":         func(_, d map[string]any) { d["polarisation"] = []any{"HH", "HH"} },
		"orbitNumber fractional":     func(_, d map[string]any) { d["orbitNumber"] = 1.5 },
		"rollAngle without max":      func(_, d map[string]any) { delete(d["rollAngle"].(map[string]any), "max") },
		"geometry not WKT":           func(_, d map[string]any) { d["geometry"] = "POINT(1 2)" },
		"geometry 3-D":               func(_, d map[string]any) { d["geometry"] = "POLYGON Z((0 0 1,1 0 1,1 1 1,0 0 1))" },
		"routeStatus other":          func(_, d map[string]any) { d["routeStatus"] = "NEW" },
		"unknown data member":        func(_, d map[string]any) { d["extra"] = 1 },
		"unknown top-level member":   func(doc, _ map[string]any) { doc["extra"] = 1 },
		"group other":                func(doc, _ map[string]any) { doc["group"] = "other" },
		"traceId missing (not null)": func(doc, _ map[string]any) { delete(doc, "traceId") },
		"type other":                 func(doc, _ map[string]any) { doc["type"] = passport.EventModeStatusChanged },
	}
	for name, breakIt := range cases {
		t.Run(name, func(t *testing.T) {
			_, doc := payloadDoc(t)
			breakIt(doc, doc["data"].(map[string]any))
			b, err := json.Marshal(doc)
			require.NoError(t, err)
			require.Error(t, v.Validate(contractschema.RouteGeoRefEvent, b))
		})
	}
	t.Run("unbroken", func(t *testing.T) {
		_, doc := payloadDoc(t)
		b, err := json.Marshal(doc)
		require.NoError(t, err)
		require.NoError(t, v.Validate(contractschema.RouteGeoRefEvent, b))
	})
}

// TestValidateOutputRecordRefuses covers the rules that tie key, headers
// and value together.
func TestValidateOutputRecordRefuses(t *testing.T) {
	v := newValidator(t)
	p, _ := payloadDoc(t)
	good := func() record.Record { return outputRecord(p, passport.EventRouteGeoRef, passport.KeyTraceID) }
	require.NoError(t, v.ValidateOutputRecord(good()))

	setHeader := func(rec *record.Record, key, value string) {
		for i := range rec.Headers {
			if rec.Headers[i].Key == key {
				rec.Headers[i].Value = []byte(value)
				return
			}
		}
		rec.Headers = append(rec.Headers, record.Header{Key: key, Value: []byte(value)})
	}
	dropHeader := func(rec *record.Record, key string) {
		var out []record.Header
		for _, h := range rec.Headers {
			if h.Key != key {
				out = append(out, h)
			}
		}
		rec.Headers = out
	}
	cases := map[string]func(*record.Record){
		"no key":                    func(r *record.Record) { r.Key = nil },
		"other key":                 func(r *record.Record) { r.Key = []byte("x") },
		"type header differs":       func(r *record.Record) { setHeader(r, "type", passport.EventModeStatusChanged) },
		"type header missing":       func(r *record.Record) { dropHeader(r, "type") },
		"eventId missing":           func(r *record.Record) { dropHeader(r, "eventId") },
		"eventId not a UUID":        func(r *record.Record) { setHeader(r, "eventId", "42") },
		"traceId header differs":    func(r *record.Record) { setHeader(r, "traceId", "other") },
		"traceId header missing":    func(r *record.Record) { dropHeader(r, "traceId") },
		"correlationId header":      func(r *record.Record) { setHeader(r, "correlationId", "other") },
		"header twice":              func(r *record.Record) { r.Headers = append(r.Headers, r.Headers[0]) },
		"header not UTF-8":          func(r *record.Record) { setHeader(r, "x", "\xff") },
		"value not JSON":            func(r *record.Record) { r.Value = []byte("{") },
		"value of the other schema": func(r *record.Record) { r.Value = []byte(`{"type":"RouteGeoRefEvent"}`) },
	}
	for name, breakIt := range cases {
		t.Run(name, func(t *testing.T) {
			rec := good()
			breakIt(&rec)
			require.Error(t, v.ValidateOutputRecord(rec))
		})
	}
	t.Run("extra header", func(t *testing.T) {
		rec := good()
		setHeader(&rec, "x-extra", "ok")
		require.NoError(t, v.ValidateOutputRecord(rec))
	})
}

// TestValidateOutputWithTestenvRecords: the one-call form the integration
// tests use on the records testenv reads.
func TestValidateOutputWithTestenvRecords(t *testing.T) {
	v := newValidator(t)
	p, _ := payloadDoc(t)
	rec := outputRecord(p, passport.EventModeStatusChanged, passport.KeyRouteID)
	r := testenv.Record{Key: rec.Key, Value: rec.Value}
	for _, h := range rec.Headers {
		r.Headers = append(r.Headers, testenv.Header{Key: h.Key, Value: h.Value})
	}
	require.NoError(t, contractschema.ValidateOutput(v, r.Key, r.Value, r.Headers))
	r.Headers = r.Headers[1:] // no type header
	require.Error(t, contractschema.ValidateOutput(v, r.Key, r.Value, r.Headers))

	var dead []testenv.Header
	for _, h := range dlqHeaders("CONTRACT", "", "not JSON") {
		dead = append(dead, testenv.Header{Key: h.Key, Value: h.Value})
	}
	require.NoError(t, contractschema.ValidateDLQ(v, dead))
	require.Error(t, contractschema.ValidateDLQ(v, dead[:3]))
}

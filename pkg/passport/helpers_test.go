package passport_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/peterstace/simplefeatures/geom"
	"github.com/stretchr/testify/require"

	"github.com/pcp/route-processing/pkg/passport"
)

// absent removes a member when given as its raw value.
const absent = "\x00absent"

type member struct{ k, v string }

// doc builds an input envelope from raw JSON member values, so tests can put
// any JSON text (12.0, 1e400, duplicate names) exactly where they want.
type doc struct {
	top   []member
	data  []member
	props []member
}

func baseDoc() *doc {
	return &doc{
		top: []member{
			{"type", `"SURVEY_GEOREFERENCE"`},
			{"traceId", `"7b0b3c1e9f"`},
			{"correlationId", `"req-551"`},
			{"group", `"pcp"`},
			{"source", `"survey-planner"`},
			{"data", ""}, // rendered from data
		},
		data: []member{
			{"type", `"Feature"`},
			{"stac_version", `"1.0.0"`},
			{"id", `"KA7-20260428-18342-R0412"`},
			{"geometry", `{"type":"Polygon","coordinates":[[[37.41,55.62],[37.92,55.58],[38.05,55.91],[37.52,55.96],[37.41,55.62]]]}`},
			{"bbox", `[37.41,55.58,38.05,55.96]`},
			{"properties", ""}, // rendered from props
			{"assets", `{}`},
			{"links", `[]`},
		},
		props: []member{
			{"pcp:route_name_full", `"KA-7 route 0412, orbit 18342"`},
			{"pcp:route_name_short", `"R0412"`},
			{"platform", `"KA-7"`},
			{"pcp:platform_full", `"Kondor-FKA No. 7"`},
			{"constellation", `"kondor"`},
			{"sat:absolute_orbit", `18342`},
			{"sat:orbit_state", `"Descending"`},
			{"start_datetime", `"2026-04-28T13:15:00+03:00"`},
			{"end_datetime", `"2026-04-28T13:16:30+03:00"`},
			{"pcp:roll_angles", `[31.0,-24.5,7.25]`},
			{"pcp:visir_angles", `[12.0,18.25]`},
			{"sar:resolution_range", `3.0`},
			{"sar:resolution_azimuth", `2.5`},
			{"sar:polarizations", `["hh","HV"]`},
			{"sar:instrument_mode", `"SM"`},
			{"processing:level", `"L1"`},
			{"datetime", `null`},
			{"pcp:route_id", `"2f1d5b1e-6c1a-4a53-9c43-1f0b5a7e9d10"`},
		},
	}
}

func set(ms []member, k, v string) []member {
	for i := range ms {
		if ms[i].k == k {
			if v == absent {
				return append(ms[:i:i], ms[i+1:]...)
			}
			ms[i].v = v
			return ms
		}
	}
	if v == absent {
		return ms
	}
	return append(ms, member{k, v})
}

func (d *doc) top1(k, v string) *doc  { d.top = set(d.top, k, v); return d }
func (d *doc) data1(k, v string) *doc { d.data = set(d.data, k, v); return d }
func (d *doc) prop(k, v string) *doc  { d.props = set(d.props, k, v); return d }
func (d *doc) geom(v string) *doc     { return d.data1("geometry", v) }

// polygon sets a Polygon geometry from raw coordinates.
func (d *doc) polygon(coords string) *doc {
	return d.geom(`{"type":"Polygon","coordinates":` + coords + `}`)
}

func (d *doc) multi(coords string) *doc {
	return d.geom(`{"type":"MultiPolygon","coordinates":` + coords + `}`)
}

func render(ms []member, inner func(k string) (string, bool)) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, m := range ms {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%q:", m.k)
		if v, ok := inner(m.k); ok && m.v == "" {
			b.WriteString(v)
		} else {
			b.WriteString(m.v)
		}
	}
	b.WriteByte('}')
	return b.String()
}

func (d *doc) bytes() []byte {
	props := render(d.props, func(string) (string, bool) { return "", false })
	data := render(d.data, func(k string) (string, bool) { return props, k == "properties" })
	return []byte(render(d.top, func(k string) (string, bool) { return data, k == "data" }))
}

// square returns a closed ring around (x, y) with half-size h.
func square(x, y, h float64) string {
	return fmt.Sprintf("[[%g,%g],[%g,%g],[%g,%g],[%g,%g],[%g,%g]]",
		x-h, y-h, x+h, y-h, x+h, y+h, x-h, y+h, x-h, y-h)
}

func contractErr(t *testing.T, err error) *passport.ContractError {
	t.Helper()
	require.Error(t, err)
	var ce *passport.ContractError
	require.True(t, errors.As(err, &ce), "error %T is not a *ContractError: %v", err, err)
	return ce
}

// checkInvariants asserts what every accepted passport must satisfy; the
// fuzzer relies on it to catch validation gaps, not just panics.
func checkInvariants(t *testing.T, p *passport.Passport) {
	t.Helper()
	require.Regexp(t, `^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`, p.RouteID)
	require.NotEqual(t, "00000000-0000-0000-0000-000000000000", p.RouteID)
	for _, s := range []struct {
		v   string
		max int
	}{{p.RouteNameFull, 0}, {p.RouteNameShort, 255}, {p.KaShort, 64}, {p.KaFull, 255}, {p.ProcessingLevel, 64}} {
		require.NotEmpty(t, s.v)
		require.True(t, utf8.ValidString(s.v))
		if s.max > 0 {
			require.LessOrEqual(t, utf8.RuneCountInString(s.v), s.max)
		}
		require.NotEmpty(t, strings.TrimSpace(s.v))
	}
	require.GreaterOrEqual(t, p.OrbitNumber, int64(0))
	require.LessOrEqual(t, p.OrbitNumber, int64(1<<53-1))
	require.Contains(t, []string{"ascending", "descending", "geostationary"}, p.OrbitState)
	require.Equal(t, time.UTC, p.IntervalBegin.Location())
	require.Equal(t, time.UTC, p.IntervalEnd.Location())
	require.False(t, p.IntervalEnd.Before(p.IntervalBegin))
	for _, a := range []passport.Angle{p.RollAngle, p.VisirAngle} {
		require.LessOrEqual(t, -90.0, a.Min)
		require.LessOrEqual(t, a.Min, a.Max)
		require.LessOrEqual(t, a.Max, 90.0)
	}
	for _, r := range []float64{p.ResolutionRange, p.ResolutionAzimuth} {
		require.False(t, math.IsInf(r, 0) || math.IsNaN(r))
		require.Greater(t, r, 0.0)
	}
	require.NotNil(t, p.Polarisation)
	seen := map[string]bool{}
	for _, s := range p.Polarisation {
		require.Contains(t, []string{"HH", "HV", "VH", "VV"}, s)
		require.False(t, seen[s])
		seen[s] = true
	}
	require.Equal(t, "PROCESSED", p.RouteStatus)

	g, err := geom.UnmarshalWKT(p.GeometryWKT)
	require.NoError(t, err, "WKT %q", p.GeometryWKT)
	require.Contains(t, []geom.GeometryType{geom.TypePolygon, geom.TypeMultiPolygon}, g.Type())
	require.Equal(t, geom.DimXY, g.CoordinatesType())
	require.False(t, g.IsEmpty())
	env := g.Envelope()
	min, max, ok := env.MinMaxXYs()
	require.True(t, ok)
	require.True(t, min.X >= -180 && max.X <= 180 && min.Y >= -90 && max.Y <= 90, "envelope %v", env)

	for _, typ := range []string{passport.EventModeStatusChanged, passport.EventRouteGeoRef} {
		pl := p.Payload(typ)
		require.True(t, json.Valid(pl), "payload %s", pl)
		require.Equal(t, pl, p.Payload(typ), "payload must be deterministic")
		var out struct {
			Type, Group, Source string
			TraceID             *string `json:"traceId"`
			CorrelationID       *string `json:"correlationId"`
		}
		require.NoError(t, json.Unmarshal(pl, &out))
		require.Equal(t, typ, out.Type)
		require.Equal(t, "pcp", out.Group)
		require.Equal(t, "route-processing", out.Source)
		require.Equal(t, p.TraceID, out.TraceID)
		require.Equal(t, p.CorrelationID, out.CorrelationID)
	}
}

// rebuild writes an input envelope that must parse back to p: accepted
// output must be acceptable input, or the passport lost or changed a value.
func rebuild(t *testing.T, p *passport.Passport) []byte {
	t.Helper()
	g, err := geom.UnmarshalWKT(p.GeometryWKT)
	require.NoError(t, err)
	gj, err := g.MarshalJSON()
	require.NoError(t, err)
	env := map[string]any{
		"traceId":       p.TraceID,
		"correlationId": p.CorrelationID,
		"data": map[string]any{
			"id":       "rebuilt",
			"geometry": json.RawMessage(gj),
			"properties": map[string]any{
				"pcp:route_id":           p.RouteID,
				"pcp:route_name_full":    p.RouteNameFull,
				"pcp:route_name_short":   p.RouteNameShort,
				"platform":               p.KaShort,
				"pcp:platform_full":      p.KaFull,
				"sat:absolute_orbit":     p.OrbitNumber,
				"sat:orbit_state":        p.OrbitState,
				"start_datetime":         p.IntervalBegin.Format(time.RFC3339Nano),
				"end_datetime":           p.IntervalEnd.Format(time.RFC3339Nano),
				"pcp:roll_angles":        []float64{p.RollAngle.Max, p.RollAngle.Min},
				"pcp:visir_angles":       []float64{p.VisirAngle.Min, p.VisirAngle.Max},
				"sar:resolution_range":   p.ResolutionRange,
				"sar:resolution_azimuth": p.ResolutionAzimuth,
				"sar:polarizations":      p.Polarisation,
				"processing:level":       p.ProcessingLevel,
			},
		},
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	require.NoError(t, enc.Encode(env))
	return buf.Bytes()
}

func requireSamePassport(t *testing.T, want, got *passport.Passport) {
	t.Helper()
	require.True(t, want.IntervalBegin.Equal(got.IntervalBegin))
	require.True(t, want.IntervalEnd.Equal(got.IntervalEnd))
	w, g := *want, *got
	w.IntervalBegin, w.IntervalEnd, g.IntervalBegin, g.IntervalEnd = time.Time{}, time.Time{}, time.Time{}, time.Time{}
	require.Equal(t, w, g)
}

func poly(rings ...string) string {
	return `{"type":"Polygon","coordinates":[` + strings.Join(rings, ",") + `]}`
}

// multi takes each member's rings.
func multi(members ...[]string) string {
	ps := make([]string, len(members))
	for i, m := range members {
		ps[i] = "[" + strings.Join(m, ",") + "]"
	}
	return `{"type":"MultiPolygon","coordinates":[` + strings.Join(ps, ",") + `]}`
}

// multiOf makes each ring a member of its own.
func multiOf(rings []string) string {
	members := make([][]string, len(rings))
	for i, r := range rings {
		members[i] = []string{r}
	}
	return multi(members...)
}

package contractschema_test

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pcp/route-processing/pkg/contractschema"
	"github.com/pcp/route-processing/pkg/passport"
)

// verdict is what the schema and the parser must say about one input.
type verdict int

const (
	accepted   verdict = iota // both accept
	rejected                  // both refuse: a schema-expressible rule
	parserOnly                // the schema passes, the parser refuses: not schema-expressible
)

// remove, as a mutation value, deletes the member.
type remove struct{}

type mutation struct {
	path  string // dotted, array indices as numbers: data.geometry.coordinates.0.3
	value any
}

// mutate returns valid-polygon.json with the mutations applied.
func mutate(t *testing.T, ms ...mutation) []byte {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(readFile(t, "valid-polygon.json")))
	dec.UseNumber()
	var doc any
	require.NoError(t, dec.Decode(&doc))
	for _, m := range ms {
		segs := strings.Split(m.path, ".")
		// Member names with a colon or dot are written with '/' in tests.
		for i, s := range segs {
			segs[i] = strings.ReplaceAll(s, "/", ".")
		}
		cur := doc
		for _, s := range segs[:len(segs)-1] {
			switch c := cur.(type) {
			case map[string]any:
				cur = c[s]
			case []any:
				i, err := strconv.Atoi(s)
				require.NoError(t, err)
				cur = c[i]
			}
		}
		last := segs[len(segs)-1]
		switch c := cur.(type) {
		case map[string]any:
			if _, ok := m.value.(remove); ok {
				delete(c, last)
			} else {
				c[last] = m.value
			}
		case []any:
			i, err := strconv.Atoi(last)
			require.NoError(t, err)
			c[i] = m.value
		default:
			t.Fatalf("path %s: not a container", m.path)
		}
	}
	b, err := json.Marshal(doc)
	require.NoError(t, err)
	return b
}

func p(name string) string { return "data.properties." + name }

func raw(s string) json.RawMessage { return json.RawMessage(s) }

// TestSchemaAgreesWithTheParser checks rule by rule that the input schema
// and pkg/passport agree: what the schema can express, it refuses exactly
// when the parser does; what it cannot, it lets through to the parser.
func TestSchemaAgreesWithTheParser(t *testing.T) {
	v := newValidator(t)
	ring := func(pts ...string) json.RawMessage {
		return raw("[[" + strings.Join(pts, ",") + "]]")
	}
	cases := []struct {
		name string
		want verdict
		ms   []mutation
	}{
		{"unchanged", accepted, nil},
		{"unknown members ignored", accepted, []mutation{{"extra", raw(`{"x":[1]}`)}, {p("x/y"), 1}}},
		{"envelope type of any JSON type", accepted, []mutation{{"type", 5}, {"group", raw(`[]`)}, {"source", nil}}},
		{"traceId null", accepted, []mutation{{"traceId", nil}}},
		{"traceId absent", accepted, []mutation{{"traceId", remove{}}}},
		{"traceId a number", rejected, []mutation{{"traceId", 5}}},
		{"correlationId an object", rejected, []mutation{{"correlationId", raw(`{}`)}}},
		{"data missing", rejected, []mutation{{"data", remove{}}}},
		{"data an array", rejected, []mutation{{"data", raw(`[]`)}}},
		{"id missing", rejected, []mutation{{"data.id", remove{}}}},
		{"id empty", rejected, []mutation{{"data.id", ""}}},
		{"id only white space", rejected, []mutation{{"data.id", " \t"}}},
		{"properties missing", rejected, []mutation{{"data.properties", remove{}}}},

		{"route_id upper case", accepted, []mutation{{p("pcp:route_id"), "2F1D5B1E-6C1A-4A53-9C43-1F0B5A7E9D10"}}},
		{"route_id null", accepted, []mutation{{p("pcp:route_id"), nil}}},
		{"route_id empty", rejected, []mutation{{p("pcp:route_id"), ""}}},
		{"route_id nil UUID", rejected, []mutation{{p("pcp:route_id"), "00000000-0000-0000-0000-000000000000"}}},
		{"route_id braces", rejected, []mutation{{p("pcp:route_id"), "{2f1d5b1e-6c1a-4a53-9c43-1f0b5a7e9d10}"}}},
		{"route_id urn", rejected, []mutation{{p("pcp:route_id"), "urn:uuid:2f1d5b1e-6c1a-4a53-9c43-1f0b5a7e9d10"}}},
		{"route_id unhyphenated", rejected, []mutation{{p("pcp:route_id"), "2f1d5b1e6c1a4a539c431f0b5a7e9d10"}}},
		{"route_id a number", rejected, []mutation{{p("pcp:route_id"), 5}}},

		{"route_name_full missing", rejected, []mutation{{p("pcp:route_name_full"), remove{}}}},
		{"route_name_full no-break spaces", rejected, []mutation{{p("pcp:route_name_full"), "\u00a0\u3000"}}},
		{"route_name_full NEL only", rejected, []mutation{{p("pcp:route_name_full"), "\u0085"}}},
		{"route_name_full with spaces kept", accepted, []mutation{{p("pcp:route_name_full"), "  R 1  "}}},
		{"route_name_short 255 code points", accepted, []mutation{{p("pcp:route_name_short"), strings.Repeat("ж", 255)}}},
		{"route_name_short 256 code points", rejected, []mutation{{p("pcp:route_name_short"), strings.Repeat("ж", 256)}}},
		{"platform 64", accepted, []mutation{{p("platform"), strings.Repeat("K", 64)}}},
		{"platform 65", rejected, []mutation{{p("platform"), strings.Repeat("K", 65)}}},
		{"platform_full a number", rejected, []mutation{{p("pcp:platform_full"), 7}}},
		{"processing level 65", rejected, []mutation{{p("processing:level"), strings.Repeat("L", 65)}}},

		{"orbit 12.0", accepted, []mutation{{p("sat:absolute_orbit"), raw(`12.0`)}}},
		{"orbit 1.8342e4", accepted, []mutation{{p("sat:absolute_orbit"), raw(`1.8342e4`)}}},
		{"orbit 2^53-1", accepted, []mutation{{p("sat:absolute_orbit"), raw(`9007199254740991`)}}},
		{"orbit 2^53", rejected, []mutation{{p("sat:absolute_orbit"), raw(`9007199254740992`)}}},
		{"orbit 12.5", rejected, []mutation{{p("sat:absolute_orbit"), raw(`12.5`)}}},
		{"orbit -1", rejected, []mutation{{p("sat:absolute_orbit"), raw(`-1`)}}},
		{"orbit zero", accepted, []mutation{{p("sat:absolute_orbit"), raw(`0`)}}},

		{"orbit state upper case", accepted, []mutation{{p("sat:orbit_state"), "GEOSTATIONARY"}}},
		{"orbit state trailing space", rejected, []mutation{{p("sat:orbit_state"), "descending "}}},
		{"orbit state long s", rejected, []mutation{{p("sat:orbit_state"), "aſcending"}}},
		{"orbit state unknown", rejected, []mutation{{p("sat:orbit_state"), "polar"}}},

		{"date-time space separator and z", accepted, []mutation{{p("start_datetime"), "2026-04-28 10:15:00z"}}},
		{"date-time lower t, 9 fraction digits", accepted, []mutation{{p("start_datetime"), "2026-04-28t13:15:00.123456789+03:00"}}},
		{"date-time 10 fraction digits", rejected, []mutation{{p("start_datetime"), "2026-04-28T13:15:00.1234567891+03:00"}}},
		{"date-time comma", rejected, []mutation{{p("start_datetime"), "2026-04-28T13:15:00,5+03:00"}}},
		{"date-time leap second", rejected, []mutation{{p("start_datetime"), "2026-04-28T13:15:60+03:00"}}},
		{"date-time offset hour 24", rejected, []mutation{{p("start_datetime"), "2026-04-28T13:15:00+24:00"}}},
		{"date-time no zone", rejected, []mutation{{p("start_datetime"), "2026-04-28T13:15:00"}}},
		{"date-time month 13", rejected, []mutation{{p("start_datetime"), "2026-13-28T13:15:00Z"}}},
		{"date-time a number", rejected, []mutation{{p("end_datetime"), 1}}},
		{"date-time 30 February", parserOnly, []mutation{{p("start_datetime"), "2026-02-30T13:15:00Z"}}},
		{"date-time year 0000 minus an offset", parserOnly, []mutation{{p("start_datetime"), "0000-01-01T00:00:00+01:00"}}},
		{"interval end before begin", parserOnly, []mutation{{p("end_datetime"), "2026-04-28T13:14:00+03:00"}}},

		{"roll angle single number", accepted, []mutation{{p("pcp:roll_angles"), 90}}},
		{"roll angle 90.5", rejected, []mutation{{p("pcp:roll_angles"), 90.5}}},
		{"roll angles empty", rejected, []mutation{{p("pcp:roll_angles"), raw(`[]`)}}},
		{"roll angles with a string", rejected, []mutation{{p("pcp:roll_angles"), raw(`[1,"2"]`)}}},
		{"visir angle -91 in array", rejected, []mutation{{p("pcp:visir_angles"), raw(`[0,-91]`)}}},
		{"visir angle overflow 1e400 (out of range anyway)", rejected, []mutation{{p("pcp:visir_angles"), raw(`[0,1e400]`)}}},

		{"resolution zero", rejected, []mutation{{p("sar:resolution_range"), 0}}},
		{"resolution a string", rejected, []mutation{{p("sar:resolution_azimuth"), "2.5"}}},
		{"resolution overflow", parserOnly, []mutation{{p("sar:resolution_azimuth"), raw(`1e400`)}}},

		{"polarisations empty", accepted, []mutation{{p("sar:polarizations"), raw(`[]`)}}},
		{"polarisations all four mixed case", accepted, []mutation{{p("sar:polarizations"), raw(`["vv","Vh","hV","HH"]`)}}},
		{"polarisation twice in other case", rejected, []mutation{{p("sar:polarizations"), raw(`["hh","HH"]`)}}},
		{"polarisation unknown", rejected, []mutation{{p("sar:polarizations"), raw(`["XX"]`)}}},
		{"polarisations a string", rejected, []mutation{{p("sar:polarizations"), "HH"}}},

		{"geometry null", rejected, []mutation{{"data.geometry", nil}}},
		{"geometry Point", rejected, []mutation{{"data.geometry", raw(`{"type":"Point","coordinates":[1,2]}`)}}},
		{"geometry type lower case", rejected, []mutation{{"data.geometry.type", "polygon"}}},
		{"coordinates empty", rejected, []mutation{{"data.geometry.coordinates", raw(`[]`)}}},
		{"ring of three", rejected, []mutation{{"data.geometry.coordinates", ring(`[0,0]`, `[1,0]`, `[0,0]`)}}},
		{"position of four numbers", rejected, []mutation{{"data.geometry.coordinates.0.1", raw(`[37.92,55.58,1,2]`)}}},
		{"position of one number", rejected, []mutation{{"data.geometry.coordinates.0.1", raw(`[37.92]`)}}},
		{"altitude a string", rejected, []mutation{{"data.geometry.coordinates.0.1", raw(`[37.92,55.58,"1"]`)}}},
		{"longitude 180.5", rejected, []mutation{{"data.geometry.coordinates.0.1.0", 180.5}}},
		{"latitude -90.5", rejected, []mutation{{"data.geometry.coordinates.0.1.1", -90.5}}},
		{"unclosed ring", parserOnly, []mutation{{"data.geometry.coordinates", ring(`[0,0]`, `[1,0]`, `[1,1]`, `[0,1]`)}}},
		{"hole outside shell", parserOnly, []mutation{{"data.geometry.coordinates", raw(
			`[[[0,0],[1,0],[1,1],[0,1],[0,0]],[[5,5],[6,5],[6,6],[5,6],[5,5]]]`)}}},
		{"multipolygon empty member", rejected, []mutation{{"data.geometry", raw(`{"type":"MultiPolygon","coordinates":[[]]}`)}}},
		{"multipolygon with polygon coordinates", rejected, []mutation{{"data.geometry", raw(
			`{"type":"MultiPolygon","coordinates":[[[0,0],[1,0],[1,1],[0,0]]]}`)}}},
		{"multipolygon", accepted, []mutation{{"data.geometry", raw(
			`{"type":"MultiPolygon","coordinates":[[[[0,0],[1,0],[1,1],[0,0]]],[[[5,5],[6,5],[6,6],[5,5]]]]}`)}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			value := mutate(t, c.ms...)
			serr := v.Validate(contractschema.Envelope, value)
			_, perr := passport.Parse(value, passport.DefaultLimits())
			switch c.want {
			case accepted:
				require.NoError(t, perr, "parser")
				require.NoError(t, serr, "schema")
			case rejected:
				require.Error(t, perr, "parser")
				require.Error(t, serr, "schema: this rule is schema-expressible")
			case parserOnly:
				require.Error(t, perr, "parser")
				require.NoError(t, serr, "schema: this rule is documented as not schema-expressible")
			}
		})
	}
}

// TestJSONTextRulesAreTheParsers: rules about the JSON text itself are
// outside any schema, which sees a decoded document.
func TestJSONTextRulesAreTheParsers(t *testing.T) {
	v := newValidator(t)
	valid := readFile(t, "valid-polygon.json")
	dup := bytes.Replace(valid, []byte(`"platform": "KA-7",`), []byte(`"platform": "KA-7", "platform": "KA-8",`), 1)
	require.NotEqual(t, valid, dup)
	_, perr := passport.Parse(dup, passport.DefaultLimits())
	require.Error(t, perr)
	require.NoError(t, v.Validate(contractschema.Envelope, dup), "a duplicate member name is invisible to a schema")

	for name, value := range map[string][]byte{"empty": nil, "null": []byte("null"), "array": []byte("[]")} {
		_, perr := passport.Parse(value, passport.DefaultLimits())
		require.Error(t, perr, name)
		require.Error(t, v.Validate(contractschema.Envelope, value), name)
	}
}

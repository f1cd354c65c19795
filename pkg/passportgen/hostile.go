package passportgen

import (
	"bytes"
	"math/rand/v2"
	"strings"
)

// Hostile kinds, as returned by [HostileCase].
const (
	KindMutated     = "mutated"      // random byte edits of a valid value
	KindTruncated   = "truncated"    // a valid value cut short
	KindDeep        = "deep"         // nesting far beyond any sane depth
	KindOversized   = "oversized"    // a value larger than the 1 MiB limit
	KindWrongType   = "wrong-type"   // a field of the wrong JSON type
	KindBadValue    = "bad-value"    // right type, value breaks a rule
	KindBadGeom     = "bad-geometry" // invalid or unsupported geometry
	KindBadJSON     = "bad-json"     // BOM, duplicates, invalid UTF-8, not an object
	KindEmpty       = "empty"        // empty or tombstone (nil) value
	KindNotPassport = "not-passport" // valid JSON of another shape
)

// HostileCase returns a random hostile record value and the kind of damage
// done to it (one of the Kind constants); a nil value stands for a tombstone
// (a record without a value). Most are contract errors; a random mutation
// occasionally leaves a value valid.
func HostileCase(rng *rand.Rand) (kind string, value []byte) {
	switch p := rng.Float64(); {
	case p < 0.18:
		return KindMutated, mutate(rng, Valid(rng).Value)
	case p < 0.30:
		v := Valid(rng).Value
		return KindTruncated, v[:rng.IntN(len(v))]
	case p < 0.38:
		return KindDeep, deep(rng)
	case p < 0.41:
		return KindOversized, oversized(rng)
	case p < 0.60:
		return KindWrongType, wrongType(rng)
	case p < 0.75:
		return KindBadValue, badValue(rng)
	case p < 0.85:
		return KindBadGeom, badGeometry(rng)
	case p < 0.94:
		return KindBadJSON, badJSON(rng)
	case p < 0.97:
		if chance(rng, 0.5) {
			return KindEmpty, nil
		}
		return KindEmpty, []byte{}
	}
	return KindNotPassport, notPassport(rng)
}

// mutate applies 1–8 byte edits, biased towards bytes that matter to JSON.
func mutate(rng *rand.Rand, v []byte) []byte {
	const significant = "{}[]\",:0123456789-+.eE\\ntfu \x00\xff"
	v = bytes.Clone(v)
	for n := 1 + rng.IntN(8); n > 0 && len(v) > 0; n-- {
		i := rng.IntN(len(v))
		c := significant[rng.IntN(len(significant))]
		if chance(rng, 0.2) {
			c = byte(rng.Uint32())
		}
		switch rng.IntN(3) {
		case 0:
			v[i] = c
		case 1:
			v = append(v[:i], append([]byte{c}, v[i:]...)...)
		default:
			v = append(v[:i], v[i+1:]...)
		}
	}
	return v
}

// deep nests arrays or objects 600 to 200,000 levels deep, at the top or
// in an ignored member, closed or not.
func deep(rng *rand.Rand) []byte {
	depth := 600 + rng.IntN(5000)
	if chance(rng, 0.2) {
		depth = 50_000 + rng.IntN(150_000)
	}
	open, closing := "[", "]"
	if chance(rng, 0.5) {
		open, closing = `{"a":`, "}"
	}
	var b bytes.Buffer
	inner := rng.IntN(2) == 0
	if inner {
		_, env := valid(rng)
		data, _ := env.get("data")
		env = env.set("data", data.(obj).set("nest", raw("0")))
		// Replace the placeholder with the nesting.
		s := string(encode(nil, env))
		i := strings.LastIndex(s, `"nest":0`)
		b.WriteString(s[:i+len(`"nest":`)])
		writeNest(&b, open, closing, depth, rng)
		b.WriteString(s[i+len(`"nest":0`):])
		return b.Bytes()
	}
	writeNest(&b, open, closing, depth, rng)
	return b.Bytes()
}

func writeNest(b *bytes.Buffer, open, closing string, depth int, rng *rand.Rand) {
	b.WriteString(strings.Repeat(open, depth))
	b.WriteString("1")
	if chance(rng, 0.7) {
		b.WriteString(strings.Repeat(closing, depth))
	}
}

// oversized is a valid passport padded past 1 MiB with an ignored member.
func oversized(rng *rand.Rand) []byte {
	_, env := valid(rng)
	pad := (1 << 20) + 1 + rng.IntN(64<<10)
	env = env.set("padding", strings.Repeat("x", pad))
	return encode(nil, env)
}

// propertyNames are the data.properties members the contract reads;
// wrongType and badValue strike them, and the envelope ids and data members
// directly.
var propertyNames = []string{
	"pcp:route_id", "pcp:route_name_full", "pcp:route_name_short", "platform",
	"pcp:platform_full", "sat:absolute_orbit", "sat:orbit_state",
	"start_datetime", "end_datetime", "pcp:roll_angles", "pcp:visir_angles",
	"sar:resolution_range", "sar:resolution_azimuth", "sar:polarizations",
	"processing:level",
}

// wrongValue returns a value of a different JSON type than v.
func wrongValue(rng *rand.Rand, v any) any {
	for {
		var w any
		switch rng.IntN(7) {
		case 0:
			w = "42"
		case 1:
			w = 42
		case 2:
			w = true
		case 3:
			w = obj{{"value", 1}}
		case 4:
			w = []any{"a", 1}
		case 5:
			w = 3.5
		default:
			w = "text"
		}
		if jsonType(w) != jsonType(v) {
			return w
		}
	}
}

func jsonType(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "string"
	case bool:
		return "bool"
	case obj:
		return "object"
	case []any, []float64:
		return "array"
	}
	return "number"
}

// edit returns a valid envelope and its data and properties objects, and
// stores them back after f changed them.
func edit(rng *rand.Rand, f func(env, data, props obj) (obj, obj, obj)) []byte {
	_, env := valid(rng)
	d, _ := env.get("data")
	data := d.(obj)
	p, _ := data.get("properties")
	props := p.(obj)
	env, data, props = f(env, data, props)
	if data != nil {
		data = data.set("properties", props)
		env = env.set("data", data)
	}
	return encode(nil, env)
}

func wrongType(rng *rand.Rand) []byte {
	return edit(rng, func(env, data, props obj) (obj, obj, obj) {
		switch p := rng.Float64(); {
		case p < 0.1:
			k := pick(rng, []string{"traceId", "correlationId"})
			env = env.set(k, wrongValue(rng, "s"))
		case p < 0.15:
			env = env.set("data", wrongValue(rng, obj{}))
			return env, nil, nil
		case p < 0.22:
			data = data.set("id", wrongValue(rng, "s"))
		case p < 0.27:
			data = data.set("properties", wrongValue(rng, obj{}))
			return env.set("data", data), nil, nil
		case p < 0.32:
			data = data.set("geometry", wrongValue(rng, obj{}))
		case p < 0.37:
			// A number given as a string is not coerced.
			props = props.set("sat:absolute_orbit", "18342")
		default:
			k := pick(rng, propertyNames)
			v, _ := props.get(k)
			w := wrongValue(rng, v)
			switch k {
			case "pcp:route_id":
				w = wrongValue(rng, "s")
			case "pcp:roll_angles", "pcp:visir_angles":
				// A number and an array of numbers are both right here.
				w = pick(rng, []any{"12", true, obj{{"min", 1}}, []any{"1"}})
			}
			props = props.set(k, w)
		}
		return env, data, props
	})
}

func badValue(rng *rand.Rand) []byte {
	return edit(rng, func(env, data, props obj) (obj, obj, obj) {
		switch rng.IntN(26) {
		case 0:
			props = props.del(pick(rng, propertyNames[1:]))
		case 1:
			data = data.del("id")
		case 2:
			data = data.set("id", "")
		case 3:
			props = props.set("pcp:route_name_short", strings.Repeat("R", 256))
		case 4:
			props = props.set("platform", strings.Repeat("К", 65))
		case 5:
			props = props.set("pcp:route_name_full", " \t ")
		case 6:
			props = props.set("sat:absolute_orbit", -1)
		case 7:
			props = props.set("sat:absolute_orbit", num("9007199254740992"))
		case 8:
			props = props.set("sat:absolute_orbit", 12.5)
		case 9:
			props = props.set("sat:orbit_state", pick(rng, []string{"descending ", "retrograde", "", "ASC"}))
		case 10:
			props = props.set("start_datetime", pick(rng, []string{
				"2026-04-28T25:00:00Z", "2026-04-28T10:00:60Z", "2026-04-28", "2026-04-28T10:00:00",
				"2026-04-28T10:00:00,5Z", "2026-04-28T10:00:00.1234567891Z", "2026-04-28T10:00:00+24:00",
				"28.04.2026 10:00", "",
			}))
		case 11:
			props = props.set("start_datetime", "2026-04-28T10:00:00Z").set("end_datetime", "2026-04-28T09:59:59.999Z")
		case 12:
			props = props.set("pcp:roll_angles", []any{})
		case 13:
			props = props.set("pcp:visir_angles", []any{10, 90.5})
		case 14:
			props = props.set("pcp:roll_angles", num("1e400"))
		case 15:
			props = props.set("sar:resolution_range", 0)
		case 16:
			props = props.set("sar:resolution_azimuth", -2.5)
		case 17:
			props = props.set("sar:polarizations", []any{"HH", "hh"})
		case 18:
			props = props.set("sar:polarizations", []any{"HH", "XX"})
		case 19:
			props = props.set("pcp:route_id", pick(rng, []string{
				"", "00000000-0000-0000-0000-000000000000", "{2f1d5b1e-6c1a-4a53-9c43-1f0b5a7e9d10}",
				"urn:uuid:2f1d5b1e-6c1a-4a53-9c43-1f0b5a7e9d10", "2f1d5b1e6c1a4a539c431f0b5a7e9d10",
				"2f1d5b1e-6c1a-4a53-9c43-1f0b5a7e9d1g", "not-a-uuid",
			}))
		case 20:
			props = props.set("processing:level", strings.Repeat("L", 65))
		case 21:
			props = props.set("pcp:platform_full", strings.Repeat("F", 256))
		case 22:
			env = env.set("data", data.set("properties", nil))
			return env, nil, nil
		case 23:
			props = props.set("pcp:route_name_short", "")
		case 24:
			props = props.set("pcp:roll_angles", []any{1, "2"})
		default:
			props = props.set("pcp:visir_angles", num("-1e309"))
		}
		return env, data, props
	})
}

func badGeometry(rng *rand.Rand) []byte {
	return edit(rng, func(env, data, props obj) (obj, obj, obj) {
		var g any
		switch rng.IntN(14) {
		case 0:
			g = obj{{"type", "LineString"}, {"coordinates", []any{[]float64{1, 2}, []float64{3, 4}}}}
		case 1:
			g = obj{{"type", "Point"}, {"coordinates", []float64{1, 2}}}
		case 2:
			g = nil
		case 3:
			g = obj{{"type", "Polygon"}, {"coordinates", []any{}}}
		case 4: // bow-tie: self-intersecting
			g = obj{{"type", "Polygon"}, {"coordinates", []any{[]any{
				[]float64{0, 0}, []float64{10, 10}, []float64{10, 0}, []float64{0, 10}, []float64{0, 0}}}}}
		case 5: // unclosed
			g = obj{{"type", "Polygon"}, {"coordinates", []any{[]any{
				[]float64{0, 0}, []float64{10, 0}, []float64{10, 10}, []float64{0, 10}}}}}
		case 6: // three positions
			g = obj{{"type", "Polygon"}, {"coordinates", []any{[]any{
				[]float64{0, 0}, []float64{10, 0}, []float64{0, 0}}}}}
		case 7: // latitude out of range
			g = obj{{"type", "Polygon"}, {"coordinates", []any{[]any{
				[]float64{0, 89}, []float64{10, 95}, []float64{10, 80}, []float64{0, 89}}}}}
		case 8: // position of four numbers
			g = obj{{"type", "Polygon"}, {"coordinates", []any{[]any{
				[]float64{0, 0, 0, 0}, []float64{10, 0}, []float64{10, 10}, []float64{0, 0}}}}}
		case 9: // hole outside the shell
			g = obj{{"type", "Polygon"}, {"coordinates", []any{
				[]any{[]float64{0, 0}, []float64{10, 0}, []float64{10, 10}, []float64{0, 10}, []float64{0, 0}},
				[]any{[]float64{20, 20}, []float64{21, 20}, []float64{21, 21}, []float64{20, 20}},
			}}}
		case 10: // overlapping members
			sq := []any{[]any{[]float64{0, 0}, []float64{10, 0}, []float64{10, 10}, []float64{0, 10}, []float64{0, 0}}}
			g = obj{{"type", "MultiPolygon"}, {"coordinates", []any{sq, sq}}}
		case 11: // empty member
			g = obj{{"type", "MultiPolygon"}, {"coordinates", []any{[]any{}}}}
		case 12: // more positions than the limit (100,000)
			n := 100_001 + rng.IntN(1000)
			pos := make([]any, 0, n+1)
			for i := 0; i < n; i++ {
				pos = append(pos, []float64{float64(i % 2), float64(i % 3)})
			}
			pos = append(pos, pos[0])
			g = obj{{"type", "Polygon"}, {"coordinates", []any{pos}}}
		default: // a non-number coordinate
			g = obj{{"type", "Polygon"}, {"coordinates", []any{[]any{
				[]any{"0", 0}, []float64{10, 0}, []float64{10, 10}, []any{"0", 0}}}}}
		}
		return env, data.set("geometry", g), props
	})
}

func badJSON(rng *rand.Rand) []byte {
	v := Valid(rng).Value
	switch rng.IntN(10) {
	case 0:
		return append([]byte{0xEF, 0xBB, 0xBF}, v...)
	case 1: // duplicate member at the top (every value starts with "type")
		return append([]byte(`{"type":"a",`), v[1:]...)
	case 2: // duplicate member deep inside
		i := bytes.Index(v, []byte(`"properties":{`))
		return append(append(bytes.Clone(v[:i+len(`"properties":{`)]), `"platform":"X","platform":"Y",`...), v[i+len(`"properties":{`):]...)
	case 3: // invalid UTF-8 in a string
		i := bytes.Index(v, []byte(`"pcp:route_name_full":"`)) + len(`"pcp:route_name_full":"`)
		return append(append(bytes.Clone(v[:i]), 0xC3, 0x28, 0xFF), v[i:]...)
	case 4: // trailing garbage
		return append(v, []byte(` {"again":1}`)...)
	case 5:
		return []byte("null")
	case 6: // NaN and comments are not JSON
		return []byte(`{"data": {"id": NaN} /* comment */}`)
	case 7: // lone surrogate escape
		i := bytes.Index(v, []byte(`"pcp:route_name_full":"`)) + len(`"pcp:route_name_full":"`)
		return append(append(bytes.Clone(v[:i]), `\ud800`...), v[i:]...)
	case 8: // single quotes
		return []byte(`{'data': {'id': 'x'}}`)
	}
	return []byte("\x00\x01\x02 binary \xfe\xff")
}

func notPassport(rng *rand.Rand) []byte {
	return []byte(pick(rng, []string{
		`[]`, `[{"data":{}}]`, `42`, `"a string"`, `true`, `{}`, `{"data":null}`,
		`{"data":[]}`, `{"data":{}}`, `{"type":"SURVEY_GEOREFERENCE"}`,
		`{"data":{"id":"x","properties":{},"geometry":{}}}`,
	}))
}

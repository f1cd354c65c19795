package passport_test

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pcp/route-processing/pkg/passport"
)

// ruleCase is one input and its outcome: wantField "" with ok means
// accepted; otherwise the error field must equal wantField exactly (tighter
// than the contract's prefix rule, so a path regression shows up here).
type ruleCase struct {
	name      string
	in        []byte
	lim       passport.Limits
	ok        bool
	wantField string
	check     func(t *testing.T, p *passport.Passport)
}

func runRules(t *testing.T, cases []ruleCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, err := passport.Parse(tc.in, tc.lim)
			if tc.ok {
				require.NoError(t, err)
				checkInvariants(t, p)
				again, err := passport.Parse(rebuild(t, p), tc.lim)
				require.NoError(t, err)
				requireSamePassport(t, p, again)
				if tc.check != nil {
					tc.check(t, p)
				}
				return
			}
			require.Nil(t, p)
			ce := contractErr(t, err)
			require.Equal(t, tc.wantField, ce.Field, "reason: %s", ce.Reason)
			require.NotEmpty(t, ce.Reason)
			if ce.Field != "" {
				require.True(t, strings.HasPrefix(ce.Reason, ce.Field), "reason %q must name the field", ce.Reason)
			}
		})
	}
}

func ok(name string, d *doc, check ...func(t *testing.T, p *passport.Passport)) ruleCase {
	c := ruleCase{name: name, in: d.bytes(), ok: true}
	if len(check) > 0 {
		c.check = check[0]
	}
	return c
}

func bad(name string, d *doc, field string) ruleCase {
	return ruleCase{name: name, in: d.bytes(), wantField: field}
}

func badRaw(name, in, field string) ruleCase {
	return ruleCase{name: name, in: []byte(in), wantField: field}
}

const (
	pRouteID = "data.properties.pcp:route_id"
	pShort   = "data.properties.pcp:route_name_short"
	pFull    = "data.properties.pcp:route_name_full"
	pPlat    = "data.properties.platform"
	pPlatF   = "data.properties.pcp:platform_full"
	pOrbit   = "data.properties.sat:absolute_orbit"
	pState   = "data.properties.sat:orbit_state"
	pStart   = "data.properties.start_datetime"
	pEnd     = "data.properties.end_datetime"
	pRoll    = "data.properties.pcp:roll_angles"
	pVisir   = "data.properties.pcp:visir_angles"
	pResR    = "data.properties.sar:resolution_range"
	pResA    = "data.properties.sar:resolution_azimuth"
	pPol     = "data.properties.sar:polarizations"
	pLevel   = "data.properties.processing:level"
	gCoords  = "data.geometry.coordinates"
)

func q(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func TestBaseDocIsValid(t *testing.T) {
	t.Parallel()
	p, err := passport.Parse(baseDoc().bytes(), passport.Limits{})
	require.NoError(t, err)
	require.Equal(t, "2f1d5b1e-6c1a-4a53-9c43-1f0b5a7e9d10", p.RouteID)
	require.Equal(t, []string{"HH", "HV"}, p.Polarisation)
}

func TestStrings(t *testing.T) {
	t.Parallel()
	e255, e256 := strings.Repeat("é", 255), strings.Repeat("é", 256)
	s64, s65 := strings.Repeat("Ж", 64), strings.Repeat("Ж", 65)
	runRules(t, []ruleCase{
		ok("short name 255 code points", baseDoc().prop("pcp:route_name_short", q(e255)),
			func(t *testing.T, p *passport.Passport) { require.Equal(t, e255, p.RouteNameShort) }),
		bad("short name 256 code points", baseDoc().prop("pcp:route_name_short", q(e256)), pShort),
		ok("short name with 4-byte chars", baseDoc().prop("pcp:route_name_short", q(strings.Repeat("🛰", 255)))),
		ok("platform 64", baseDoc().prop("platform", q(s64))),
		bad("platform 65", baseDoc().prop("platform", q(s65)), pPlat),
		ok("platform_full 255", baseDoc().prop("pcp:platform_full", q(e255))),
		bad("platform_full 256", baseDoc().prop("pcp:platform_full", q(e256)), pPlatF),
		ok("processing level 64", baseDoc().prop("processing:level", q(s64))),
		bad("processing level 65", baseDoc().prop("processing:level", q(s65)), pLevel),
		ok("long full name has no limit", baseDoc().prop("pcp:route_name_full", q(strings.Repeat("x", 5000)))),
		ok("not trimmed", baseDoc().prop("pcp:route_name_short", `" R0412 "`),
			func(t *testing.T, p *passport.Passport) { require.Equal(t, " R0412 ", p.RouteNameShort) }),
		ok("escapes decoded", baseDoc().prop("pcp:route_name_full", `"R\u00e9 \"q\"\n\ud83d\udef0"`),
			func(t *testing.T, p *passport.Passport) { require.Equal(t, "Ré \"q\"\n🛰", p.RouteNameFull) }),
		bad("unpaired surrogate", baseDoc().prop("pcp:route_name_full", `"x\ud800y"`), pFull),
		bad("NUL character", baseDoc().prop("pcp:route_name_full", `"KA-7 route\u0000 0412"`), pFull),
		bad("empty short name", baseDoc().prop("pcp:route_name_short", `""`), pShort),
		bad("white space short name", baseDoc().prop("pcp:route_name_short", `" \t "`), pShort),
		bad("unicode white space full name", baseDoc().prop("pcp:route_name_full", `"\u00a0\u2003"`), pFull),
		bad("number as name", baseDoc().prop("platform", `7`), pPlat),
		bad("null name", baseDoc().prop("platform", `null`), pPlat),
		bad("missing full name", baseDoc().prop("pcp:route_name_full", absent), pFull),
		bad("missing id", baseDoc().data1("id", absent), "data.id"),
		bad("empty id", baseDoc().data1("id", `""`), "data.id"),
		bad("numeric id", baseDoc().data1("id", `12`), "data.id"),
	})
}

func TestOrbit(t *testing.T) {
	t.Parallel()
	orbit := func(want int64) func(t *testing.T, p *passport.Passport) {
		return func(t *testing.T, p *passport.Passport) { require.Equal(t, want, p.OrbitNumber) }
	}
	runRules(t, []ruleCase{
		ok("12.0", baseDoc().prop("sat:absolute_orbit", `12.0`), orbit(12)),
		ok("1.8342e4", baseDoc().prop("sat:absolute_orbit", `1.8342e4`), orbit(18342)),
		ok("1834200E-2", baseDoc().prop("sat:absolute_orbit", `1834200E-2`), orbit(18342)),
		ok("0.5e+1", baseDoc().prop("sat:absolute_orbit", `0.5e+1`), orbit(5)),
		ok("0", baseDoc().prop("sat:absolute_orbit", `0`), orbit(0)),
		ok("-0", baseDoc().prop("sat:absolute_orbit", `-0.0`), orbit(0)),
		ok("2^53-1", baseDoc().prop("sat:absolute_orbit", `9007199254740991`), orbit(1<<53-1)),
		ok("2^53-1 in exponent form", baseDoc().prop("sat:absolute_orbit", `9.007199254740991e15`), orbit(1<<53-1)),
		bad("2^53", baseDoc().prop("sat:absolute_orbit", `9007199254740992`), pOrbit),
		bad("2^53+1 rounds to 2^53 as a double", baseDoc().prop("sat:absolute_orbit", `9007199254740993`), pOrbit),
		bad("1e16", baseDoc().prop("sat:absolute_orbit", `1e16`), pOrbit),
		bad("1e400", baseDoc().prop("sat:absolute_orbit", `1e400`), pOrbit),
		bad("12.5", baseDoc().prop("sat:absolute_orbit", `12.5`), pOrbit),
		bad("12.0000000000000000001", baseDoc().prop("sat:absolute_orbit", `12.0000000000000000001`), pOrbit),
		bad("1e-400", baseDoc().prop("sat:absolute_orbit", `1e-400`), pOrbit),
		bad("string", baseDoc().prop("sat:absolute_orbit", `"18342"`), pOrbit),
		bad("-1", baseDoc().prop("sat:absolute_orbit", `-1`), pOrbit),
		bad("bool", baseDoc().prop("sat:absolute_orbit", `true`), pOrbit),
		bad("null", baseDoc().prop("sat:absolute_orbit", `null`), pOrbit),
		bad("missing", baseDoc().prop("sat:absolute_orbit", absent), pOrbit),
	})
}

func TestOrbitState(t *testing.T) {
	t.Parallel()
	state := func(want string) func(t *testing.T, p *passport.Passport) {
		return func(t *testing.T, p *passport.Passport) { require.Equal(t, want, p.OrbitState) }
	}
	runRules(t, []ruleCase{
		ok("Descending", baseDoc().prop("sat:orbit_state", `"Descending"`), state("descending")),
		ok("ASCENDING", baseDoc().prop("sat:orbit_state", `"ASCENDING"`), state("ascending")),
		ok("geostationary", baseDoc().prop("sat:orbit_state", `"geostationary"`), state("geostationary")),
		bad("trailing space", baseDoc().prop("sat:orbit_state", `"descending "`), pState),
		bad("unknown", baseDoc().prop("sat:orbit_state", `"north"`), pState),
		bad("unicode case folding is not letter case", baseDoc().prop("sat:orbit_state", `"aſcending"`), pState),
		bad("number", baseDoc().prop("sat:orbit_state", `1`), pState),
		bad("missing", baseDoc().prop("sat:orbit_state", absent), pState),
	})
}

func TestRouteID(t *testing.T) {
	t.Parallel()
	id := func(want string) func(t *testing.T, p *passport.Passport) {
		return func(t *testing.T, p *passport.Passport) { require.Equal(t, want, p.RouteID) }
	}
	runRules(t, []ruleCase{
		ok("upper case emitted lower", baseDoc().prop("pcp:route_id", `"2F1D5B1E-6C1A-4A53-9C43-1F0B5A7E9D10"`),
			id("2f1d5b1e-6c1a-4a53-9c43-1f0b5a7e9d10")),
		ok("max UUID", baseDoc().prop("pcp:route_id", `"ffffffff-ffff-ffff-ffff-ffffffffffff"`),
			id("ffffffff-ffff-ffff-ffff-ffffffffffff")),
		ok("absent derives from id", baseDoc().data1("id", `"test"`).prop("pcp:route_id", absent),
			id("098f6bcd-4621-3373-8ade-4e832627b4f6")),
		ok("null derives from id", baseDoc().data1("id", `"test"`).prop("pcp:route_id", `null`),
			id("098f6bcd-4621-3373-8ade-4e832627b4f6")),
		ok("derived from decoded id", baseDoc().data1("id", `"t\u0065st"`).prop("pcp:route_id", absent),
			id("098f6bcd-4621-3373-8ade-4e832627b4f6")),
		// data.id is never stored: a NUL is one more byte of its MD5.
		ok("NUL in id", baseDoc().data1("id", `"a\u0000b"`).prop("pcp:route_id", absent),
			id("70350f60-27bc-3371-bf6b-76473084309b")),
		bad("lone surrogate in id", baseDoc().data1("id", `"a\ud800"`).prop("pcp:route_id", absent), "data.id"),
		bad("nil UUID", baseDoc().prop("pcp:route_id", `"00000000-0000-0000-0000-000000000000"`), pRouteID),
		bad("urn prefix", baseDoc().prop("pcp:route_id", `"urn:uuid:2f1d5b1e-6c1a-4a53-9c43-1f0b5a7e9d10"`), pRouteID),
		bad("braces", baseDoc().prop("pcp:route_id", `"{2f1d5b1e-6c1a-4a53-9c43-1f0b5a7e9d10}"`), pRouteID),
		bad("unhyphenated", baseDoc().prop("pcp:route_id", `"2f1d5b1e6c1a4a539c431f0b5a7e9d10"`), pRouteID),
		bad("empty", baseDoc().prop("pcp:route_id", `""`), pRouteID),
		bad("non-hex", baseDoc().prop("pcp:route_id", `"2f1d5b1e-6c1a-4a53-9c43-1f0b5a7e9d1g"`), pRouteID),
		bad("hyphen misplaced", baseDoc().prop("pcp:route_id", `"2f1d5b1e6-c1a-4a53-9c43-1f0b5a7e9d10"`), pRouteID),
		bad("surrounding space", baseDoc().prop("pcp:route_id", `" 2f1d5b1e-6c1a-4a53-9c43-1f0b5a7e9d10"`), pRouteID),
		bad("number", baseDoc().prop("pcp:route_id", `1`), pRouteID),
	})
}

func TestDateTimes(t *testing.T) {
	t.Parallel()
	begin := func(want string) func(t *testing.T, p *passport.Passport) {
		return func(t *testing.T, p *passport.Passport) {
			require.Equal(t, want, p.IntervalBegin.Format(time.RFC3339Nano))
		}
	}
	start := func(v string) *doc {
		return baseDoc().prop("start_datetime", q(v)).prop("end_datetime", `"2030-01-01T00:00:00Z"`)
	}
	runRules(t, []ruleCase{
		ok("T and offset to UTC", start("2026-04-28T13:15:00+03:00"), begin("2026-04-28T10:15:00Z")),
		ok("lower t and z", start("2026-04-28t10:15:00z"), begin("2026-04-28T10:15:00Z")),
		ok("space separator", start("2026-04-28 10:15:00Z"), begin("2026-04-28T10:15:00Z")),
		ok("+23:59", start("2026-04-28T10:15:00+23:59"), begin("2026-04-27T10:16:00Z")),
		ok("-23:59", start("2026-04-28T10:15:00-23:59"), begin("2026-04-29T10:14:00Z")),
		ok("-00:00", start("2026-04-28T10:15:00-00:00"), begin("2026-04-28T10:15:00Z")),
		ok("9 fractional digits", start("2026-04-28T10:15:00.123456789Z"), begin("2026-04-28T10:15:00.123456789Z")),
		ok("trailing zeros dropped", start("2026-04-28T10:15:00.500Z"), begin("2026-04-28T10:15:00.5Z")),
		ok("leap day", start("2024-02-29T00:00:00Z"), begin("2024-02-29T00:00:00Z")),
		ok("year 2000 leap day", start("2000-02-29T00:00:00Z"), begin("2000-02-29T00:00:00Z")),
		ok("escaped text", baseDoc().prop("start_datetime", `"2026-04-28\u005410:15:00Z"`), begin("2026-04-28T10:15:00Z")),
		bad("+24:00", start("2026-04-28T10:15:00+24:00"), pStart),
		bad("offset minutes 60", start("2026-04-28T10:15:00+01:60"), pStart),
		bad("10 fractional digits", start("2026-04-28T10:15:00.1234567890Z"), pStart),
		bad("comma", start("2026-04-28T10:15:00,5Z"), pStart),
		bad("dot without digits", start("2026-04-28T10:15:00.Z"), pStart),
		bad("leap second", start("2016-12-31T23:59:60Z"), pStart),
		bad("hour 24", start("2026-04-28T24:00:00Z"), pStart),
		bad("minute 60", start("2026-04-28T10:60:00Z"), pStart),
		bad("Feb 29 non-leap", start("2026-02-29T10:15:00Z"), pStart),
		bad("1900 not leap", start("1900-02-29T10:15:00Z"), pStart),
		bad("Apr 31", start("2026-04-31T10:15:00Z"), pStart),
		bad("month 13", start("2026-13-01T10:15:00Z"), pStart),
		bad("day 0", start("2026-04-00T10:15:00Z"), pStart),
		bad("two spaces", start("2026-04-28  10:15:00Z"), pStart),
		bad("no zone", start("2026-04-28T10:15:00"), pStart),
		bad("date only", start("2026-04-28"), pStart),
		bad("hhmm offset", start("2026-04-28T10:15:00+0300"), pStart),
		bad("short hour", start("2026-04-28T1:15:00Z"), pStart),
		bad("trailing text", start("2026-04-28T10:15:00Zx"), pStart),
		bad("UTC name", start("2026-04-28T10:15:00 UTC"), pStart),
		bad("number", baseDoc().prop("start_datetime", `1714299300`), pStart),
		bad("missing end", baseDoc().prop("end_datetime", absent), pEnd),
		bad("end before start", baseDoc().prop("end_datetime", `"2026-04-28T13:14:59.999+03:00"`), pEnd),
		ok("end equals start", baseDoc().prop("end_datetime", `"2026-04-28T13:15:00+03:00"`)),
		ok("end equals start in another zone", baseDoc().prop("end_datetime", `"2026-04-28T10:15:00Z"`)),
		bad("year -1 in UTC", baseDoc().prop("start_datetime", `"0000-01-01T00:00:00+01:00"`), pStart),
	})
}

func TestAnglesAndResolutions(t *testing.T) {
	t.Parallel()
	roll := func(min, max float64) func(t *testing.T, p *passport.Passport) {
		return func(t *testing.T, p *passport.Passport) {
			require.Equal(t, passport.Angle{Min: min, Max: max}, p.RollAngle)
		}
	}
	runRules(t, []ruleCase{
		ok("number", baseDoc().prop("pcp:roll_angles", `-12.5`), roll(-12.5, -12.5)),
		ok("array", baseDoc().prop("pcp:roll_angles", `[31.0,-24.5,7.25]`), roll(-24.5, 31)),
		ok("one element", baseDoc().prop("pcp:roll_angles", `[5]`), roll(5, 5)),
		ok("bounds", baseDoc().prop("pcp:roll_angles", `[-90, 90]`), roll(-90, 90)),
		bad("empty array", baseDoc().prop("pcp:roll_angles", `[]`), pRoll),
		bad("90.0001", baseDoc().prop("pcp:roll_angles", `90.0001`), pRoll),
		bad("-90.0001 in array", baseDoc().prop("pcp:roll_angles", `[0,1,-90.0001]`), pRoll+"[2]"),
		bad("1e400", baseDoc().prop("pcp:visir_angles", `[1e400]`), pVisir+"[0]"),
		bad("string element", baseDoc().prop("pcp:visir_angles", `[1,"2"]`), pVisir+"[1]"),
		bad("nested array", baseDoc().prop("pcp:visir_angles", `[[1]]`), pVisir+"[0]"),
		bad("string", baseDoc().prop("pcp:visir_angles", `"12"`), pVisir),
		bad("null", baseDoc().prop("pcp:visir_angles", `null`), pVisir),
		bad("missing", baseDoc().prop("pcp:roll_angles", absent), pRoll),
		bad("escaped quote inside a skipped element", baseDoc().prop("pcp:roll_angles", `[1,"a\"],[\\",{"b":["]"]}]`), pRoll+"[1]"),
		bad("object element", baseDoc().prop("pcp:roll_angles", `[1,{"a":"}"},true]`), pRoll+"[1]"),
		ok("tiny resolution", baseDoc().prop("sar:resolution_range", `5e-324`)),
		bad("zero resolution", baseDoc().prop("sar:resolution_range", `0`), pResR),
		bad("underflow to zero", baseDoc().prop("sar:resolution_range", `1e-400`), pResR),
		bad("negative resolution", baseDoc().prop("sar:resolution_azimuth", `-2.5`), pResA),
		bad("infinite resolution", baseDoc().prop("sar:resolution_azimuth", `1e400`), pResA),
		bad("string resolution", baseDoc().prop("sar:resolution_azimuth", `"2.5"`), pResA),
		bad("missing resolution", baseDoc().prop("sar:resolution_range", absent), pResR),
	})
}

func TestPolarisations(t *testing.T) {
	t.Parallel()
	pol := func(want ...string) func(t *testing.T, p *passport.Passport) {
		return func(t *testing.T, p *passport.Passport) {
			if want == nil {
				want = []string{}
			}
			require.Equal(t, want, p.Polarisation)
		}
	}
	runRules(t, []ruleCase{
		ok("lower case, order kept", baseDoc().prop("sar:polarizations", `["vv","hH","Vh","hv"]`), pol("VV", "HH", "VH", "HV")),
		ok("empty", baseDoc().prop("sar:polarizations", `[]`), pol()),
		bad("duplicate", baseDoc().prop("sar:polarizations", `["HH","hv","hh"]`), pPol+"[2]"),
		bad("unknown", baseDoc().prop("sar:polarizations", `["HH","XX"]`), pPol+"[1]"),
		bad("padded", baseDoc().prop("sar:polarizations", `["HH "]`), pPol+"[0]"),
		bad("number element", baseDoc().prop("sar:polarizations", `[1]`), pPol+"[0]"),
		bad("string not array", baseDoc().prop("sar:polarizations", `"HH"`), pPol),
		bad("null", baseDoc().prop("sar:polarizations", `null`), pPol),
		bad("missing", baseDoc().prop("sar:polarizations", absent), pPol),
	})
}

func TestEnvelope(t *testing.T) {
	t.Parallel()
	runRules(t, []ruleCase{
		ok("ignored members of any type", baseDoc().top1("type", `{"x":[1]}`).top1("group", `7`).top1("source", `null`).top1("extra", `[true]`)),
		ok("null traceId", baseDoc().top1("traceId", `null`),
			func(t *testing.T, p *passport.Passport) { require.Nil(t, p.TraceID) }),
		ok("absent correlationId", baseDoc().top1("correlationId", absent),
			func(t *testing.T, p *passport.Passport) { require.Nil(t, p.CorrelationID) }),
		bad("traceId number", baseDoc().top1("traceId", `42`), "traceId"),
		bad("traceId bool", baseDoc().top1("traceId", `false`), "traceId"),
		bad("unpaired surrogate in traceId", baseDoc().top1("traceId", `"\udfff"`), "traceId"),
		bad("NUL character in correlationId", baseDoc().top1("correlationId", `"a\u0000"`), "correlationId"),
		bad("correlationId object", baseDoc().top1("correlationId", `{}`), "correlationId"),
		bad("data missing", baseDoc().top1("data", absent), "data"),
		bad("data array", baseDoc().top1("data", `[]`), "data"),
		bad("data null", baseDoc().top1("data", `null`), "data"),
		bad("properties missing", baseDoc().data1("properties", absent), "data.properties"),
		bad("properties array", baseDoc().data1("properties", `[]`), "data.properties"),
		bad("traceId checked before data", baseDoc().top1("traceId", `1`).top1("data", absent), "traceId"),
		bad("properties in table order", baseDoc().prop("platform", `1`).prop("sat:absolute_orbit", `"x"`), pPlat),
		bad("properties before geometry", baseDoc().prop("processing:level", `""`).geom(`null`), pLevel),
		ok("unknown members anywhere", baseDoc().data1("assets", `{"a":{"type":"Polygon","coordinates":1}}`).prop("pcp:extra", `{"platform":1}`)),
	})
}

func TestJSONText(t *testing.T) {
	t.Parallel()
	valid := string(baseDoc().bytes())
	deep := strings.Repeat("[", 600) + strings.Repeat("]", 600)
	okDeep := strings.Repeat("[", 500) + strings.Repeat("]", 500)
	manyKeys := func(dupAt int) string {
		var b strings.Builder
		b.WriteString("{")
		for i := 0; i < 100; i++ {
			fmt.Fprintf(&b, `"k%d":%d,`, i, i)
		}
		fmt.Fprintf(&b, `"k%d":0}`, dupAt)
		return b.String()
	}
	runRules(t, []ruleCase{
		{name: "nil value", in: nil},
		{name: "empty value", in: []byte{}},
		badRaw("white space only", " \n", ""),
		badRaw("null literal", "null", ""),
		badRaw("null then garbage", "null x", ""),
		badRaw("array", "[]", ""),
		badRaw("string", `"x"`, ""),
		badRaw("BOM", "\xEF\xBB\xBF"+valid, ""),
		badRaw("truncated", valid[:len(valid)-1], ""),
		badRaw("trailing data", valid+"{}", ""),
		ok("trailing white space", baseDoc()),
		badRaw("two values", valid+" "+valid, ""),
		badRaw("single quotes", `{'data':{}}`, ""),
		badRaw("trailing comma", `{"data":{},}`, ""),
		badRaw("missing colon", `{"data" {}}`, ""),
		badRaw("unquoted name", `{data:{}}`, ""),
		badRaw("leading zero", `{"data":{"id":01}}`, ""),
		badRaw("NaN literal", `{"data":{"id":NaN}}`, ""),
		badRaw("bad null", `{"data":{"id":nul}}`, ""),
		badRaw("bad true", `{"data":{"id":tru}}`, ""),
		badRaw("minus only", `{"data":{"id":-}}`, ""),
		badRaw("dot without fraction", `{"data":{"id":1.}}`, ""),
		badRaw("exponent without digits", `{"data":{"id":1e+}}`, ""),
		badRaw("plus sign", `{"data":{"id":+1}}`, ""),
		badRaw("short unicode escape", `{"data":{"id":"\u12"}}`, ""),
		badRaw("bad hex in escape", `{"data":{"id":"\u12g4"}}`, ""),
		badRaw("control char in string", "{\"data\":{\"id\":\"a\tb\"}}", ""),
		badRaw("bad escape", `{"data":{"id":"\x"}}`, ""),
		badRaw("invalid UTF-8 outside strings", "{\"data\":\xff}", ""),
		bad("invalid UTF-8 in a value", baseDoc().prop("platform", "\"KA\xff\""), pPlat),
		bad("invalid UTF-8 in ignored value", baseDoc().data1("links", "[\"\xc3\"]"), "data.links[0]"),
		badRaw("nesting too deep", `{"data":{"x":`+deep+`}}`, ""),
		bad("deep but allowed nesting", baseDoc().data1("x", okDeep).prop("platform", absent), pPlat),
		// A syntax error wins over a field error found earlier in the text.
		badRaw("syntax error after a duplicate", `{"data":{},"data":{}`, ""),
		bad("duplicate envelope member", baseDoc().top1("traceId", `"a","traceId":"b"`), "traceId"),
		bad("duplicate data member", baseDoc().data1("id", `"a","id":"a"`), "data.id"),
		bad("duplicate property", baseDoc().prop("platform", `"KA-7","platform":"KA-7"`), pPlat),
		bad("duplicate after escape decoding", baseDoc().prop("platform", `"KA-7","pl\u0061tform":"KA-7"`), pPlat),
		bad("duplicate in ignored object", baseDoc().data1("assets", `{"a":1,"b":{"c":1,"c":2}}`), "data.assets.b.c"),
		bad("duplicate in array element", baseDoc().data1("links", `[{},{"x":1,"x":2}]`), "data.links[1].x"),
		bad("duplicate in geometry", baseDoc().geom(`{"type":"Polygon","type":"Polygon","coordinates":[]}`), "data.geometry.type"),
		bad("duplicate in a large object", baseDoc().data1("assets", manyKeys(3)), "data.assets.k3"),
		ok("large object without duplicate", baseDoc().data1("assets", manyKeys(100))),
		ok("same name in sibling objects", baseDoc().data1("assets", `{"a":{"x":1},"b":{"x":1}}`)),
		ok("lone surrogate in ignored string", baseDoc().data1("assets", `{"note":"\udc00"}`)),
		// A path names at most 128 bytes of a member name (a DLQ header).
		bad("long duplicate name", baseDoc().data1("assets", `{"`+strings.Repeat("n", 100_000)+`":1,"`+strings.Repeat("n", 100_000)+`":2}`),
			"data.assets."+strings.Repeat("n", 128)+"…"),
		bad("long duplicate name, multibyte", baseDoc().data1("assets", `{"`+strings.Repeat("é", 100)+`":1,"`+strings.Repeat("é", 100)+`":2}`),
			"data.assets."+strings.Repeat("é", 64)+"…"),
		// And the whole path at 1 KiB: its head and its tail.
		bad("deep duplicate under long names", baseDoc().data1("assets", deepNames(100, strings.Repeat("n", 200))),
			"data.assets."+strings.Repeat(strings.Repeat("n", 128)+"….", 3)+strings.Repeat("n", 104)+ // 512 bytes
				"…"+
				strings.Repeat("n", 108)+"…."+strings.Repeat(strings.Repeat("n", 128)+"….", 3)+"a"), // 509 bytes
		badRaw("duplicate in an ignored envelope member", `{"":{"c":1,"c":2},"data":{}}`, ".c"),
		bad("distinct lone surrogate names", baseDoc().data1("assets", `{"\ud800":1,"\ud801":2,"\ud800":3}`), ""),
		{name: "over the size limit", in: []byte(valid), lim: passport.Limits{MaxValueBytes: len(valid) - 1}},
		{name: "at the size limit", in: []byte(valid), lim: passport.Limits{MaxValueBytes: len(valid)}, ok: true},
	})
}

func TestGeometry(t *testing.T) {
	t.Parallel()
	wkt := func(want string) func(t *testing.T, p *passport.Passport) {
		return func(t *testing.T, p *passport.Passport) { require.Equal(t, want, p.GeometryWKT) }
	}
	fiveRing := `[[[0,0],[1,0],[1,1],[0,1],[0,0]]]`
	runRules(t, []ruleCase{
		ok("lat 90, lon 180", baseDoc().polygon(`[[[0,0],[180,0],[180,90],[0,90],[0,0]]]`),
			wkt("POLYGON((0 0,180 0,180 90,0 90,0 0))")),
		ok("lat -90, lon -180", baseDoc().polygon(`[[[0,0],[-180,0],[-180,-90],[0,-90],[0,0]]]`)),
		bad("lon 180.0001", baseDoc().polygon(`[[[0,0],[180.0001,0],[180,90],[0,90],[0,0]]]`), gCoords+"[0][1][0]"),
		bad("lon -180.0001", baseDoc().polygon(`[[[-180.0001,0],[1,0],[1,1],[0,1],[-180.0001,0]]]`), gCoords+"[0][0][0]"),
		bad("lat 90.0001", baseDoc().polygon(`[[[0,0],[1,0],[1,90.0001],[0,1],[0,0]]]`), gCoords+"[0][2][1]"),
		bad("lat -90.0001", baseDoc().polygon(`[[[0,0],[1,0],[1,-90.0001],[0,1],[0,0]]]`), gCoords+"[0][2][1]"),
		bad("non-finite", baseDoc().polygon(`[[[0,0],[1e400,0],[1,1],[0,1],[0,0]]]`), gCoords+"[0][1][0]"),
		bad("non-finite altitude", baseDoc().polygon(`[[[0,0,1e400],[1,0],[1,1],[0,1],[0,0]]]`), gCoords+"[0][0][2]"),
		ok("3-D positions dropped", baseDoc().polygon(`[[[0,0,5],[1,0,6],[1,1,7],[0,1,8],[0,0,9]]]`),
			wkt("POLYGON((0 0,1 0,1 1,0 1,0 0))")),
		ok("mixed 2-D and 3-D", baseDoc().polygon(`[[[0,0],[1,0,6],[1,1],[0,1,8],[0,0]]]`)),
		bad("4-number position", baseDoc().polygon(`[[[0,0],[1,0,0,0],[1,1],[0,1],[0,0]]]`), gCoords+"[0][1]"),
		bad("1-number position", baseDoc().polygon(`[[[0,0],[1],[1,1],[0,1],[0,0]]]`), gCoords+"[0][1]"),
		bad("empty position", baseDoc().polygon(`[[[0,0],[],[1,1],[0,1],[0,0]]]`), gCoords+"[0][1]"),
		bad("string coordinate", baseDoc().polygon(`[[[0,0],[1,"0"],[1,1],[0,1],[0,0]]]`), gCoords+"[0][1][1]"),
		bad("position not array", baseDoc().polygon(`[[[0,0],{},[1,1],[0,1],[0,0]]]`), gCoords+"[0][1]"),
		bad("unclosed ring", baseDoc().polygon(`[[[0,0],[1,0],[1,1],[0,1],[0,0.5]]]`), gCoords+"[0]"),
		bad("closed only in Z", baseDoc().polygon(`[[[0,0,1],[1,0],[1,1],[0,1],[0,0.1,1]]]`), gCoords+"[0]"),
		bad("3-position ring", baseDoc().polygon(`[[[0,0],[1,0],[0,0]]]`), gCoords+"[0]"),
		bad("empty ring", baseDoc().polygon(`[[]]`), gCoords+"[0]"),
		bad("empty hole", baseDoc().polygon(`[`+square(10, 10, 5)+`,[]]`), gCoords+"[1]"),
		bad("ring not array", baseDoc().polygon(`[1]`), gCoords+"[0]"),
		bad("empty coordinates", baseDoc().polygon(`[]`), gCoords),
		bad("coordinates null", baseDoc().polygon(`null`), gCoords),
		bad("coordinates object", baseDoc().polygon(`{}`), gCoords),
		bad("coordinates missing", baseDoc().geom(`{"type":"Polygon"}`), gCoords),
		ok("hole inside", baseDoc().polygon(`[`+square(10, 10, 5)+`,`+square(10, 10, 1)+`]`)),
		bad("hole outside shell", baseDoc().polygon(`[`+square(10, 10, 5)+`,`+square(30, 30, 1)+`]`), "data.geometry"),
		bad("self-intersecting", baseDoc().polygon(`[[[0,0],[1,1],[1,0],[0,1],[0,0]]]`), "data.geometry"),
		bad("all positions equal", baseDoc().polygon(`[[[1,1],[1,1],[1,1],[1,1]]]`), "data.geometry"),
		bad("spike", baseDoc().polygon(`[[[0,0],[2,0],[1,0],[1,1],[0,0]]]`), "data.geometry"),
		ok("multipolygon", baseDoc().multi(`[[`+square(10, 10, 1)+`],[`+square(20, 20, 1)+`]]`),
			wkt("MULTIPOLYGON(((9 9,11 9,11 11,9 11,9 9)),((19 19,21 19,21 21,19 21,19 19)))")),
		bad("overlapping multipolygon parts", baseDoc().multi(`[[`+square(10, 10, 2)+`],[`+square(11, 11, 2)+`]]`), "data.geometry"),
		bad("nested multipolygon parts", baseDoc().multi(`[[`+square(10, 10, 5)+`],[`+square(10, 10, 1)+`]]`), "data.geometry"),
		bad("empty multipolygon member", baseDoc().multi(`[[`+square(10, 10, 1)+`],[]]`), gCoords+"[1]"),
		bad("multipolygon member not array", baseDoc().multi(`[[`+square(10, 10, 1)+`],"x"]`), gCoords+"[1]"),
		bad("multipolygon bad position", baseDoc().multi(`[[`+square(10, 10, 1)+`],[[[0,0],[1,0],[1,91],[0,1],[0,0]]]]`), gCoords+"[1][0][2][1]"),
		bad("multipolygon ring too short", baseDoc().multi(`[[`+square(10, 10, 1)+`,[[0,0],[1,0],[0,0]]]]`), gCoords+"[0][1]"),
		bad("multipolygon with polygon coordinates", baseDoc().multi(fiveRing), gCoords+"[0][0][0]"),
		bad("empty multipolygon", baseDoc().multi(`[]`), gCoords),
		bad("LineString", baseDoc().geom(`{"type":"LineString","coordinates":[[0,0],[1,1]]}`), "data.geometry.type"),
		bad("lower-case type", baseDoc().geom(`{"type":"polygon","coordinates":`+fiveRing+`}`), "data.geometry.type"),
		bad("type missing", baseDoc().geom(`{"coordinates":`+fiveRing+`}`), "data.geometry.type"),
		bad("type number", baseDoc().geom(`{"type":1,"coordinates":`+fiveRing+`}`), "data.geometry.type"),
		bad("Feature", baseDoc().geom(`{"type":"Feature","geometry":{"type":"Polygon","coordinates":`+fiveRing+`}}`), "data.geometry.type"),
		bad("geometry null", baseDoc().geom(`null`), "data.geometry"),
		bad("geometry missing", baseDoc().data1("geometry", absent), "data.geometry"),
		bad("geometry string", baseDoc().geom(`"POLYGON((0 0,1 0,1 1,0 0))"`), "data.geometry"),
		ok("extra geometry members ignored", baseDoc().geom(`{"bbox":[0,0,1,1],"type":"Polygon","coordinates":`+fiveRing+`,"crs":null}`)),
		{name: "positions at the limit", in: baseDoc().polygon(fiveRing).bytes(), lim: passport.Limits{MaxPositions: 5}, ok: true},
		{name: "positions over the limit", in: baseDoc().polygon(fiveRing).bytes(), lim: passport.Limits{MaxPositions: 4}, wantField: gCoords},
		{name: "positions over the limit across rings", lim: passport.Limits{MaxPositions: 9},
			in: baseDoc().polygon(`[` + square(10, 10, 5) + `,` + square(10, 10, 1) + `]`).bytes(), wantField: gCoords},
	})
}

func TestDefaultLimits(t *testing.T) {
	t.Parallel()
	require.Equal(t, passport.Limits{MaxValueBytes: 1 << 20, MaxPositions: 100_000}, passport.DefaultLimits())

	// 100,001 positions exceed the default even though the value fits.
	var b strings.Builder
	b.WriteString(`[[[0,0]`)
	for i := 1; i < 100_000; i++ {
		fmt.Fprintf(&b, `,[%d,1]`, i%180)
	}
	b.WriteString(`,[0,0]]]`)
	value := baseDoc().polygon(b.String()).bytes()
	require.Less(t, len(value), 1<<20)
	// A zero Limits means the defaults, not "nothing allowed".
	_, err := passport.Parse(value, passport.Limits{})
	require.Equal(t, gCoords, contractErr(t, err).Field)

	over := make([]byte, 1<<20+1)
	_, err = passport.Parse(over, passport.Limits{})
	require.Empty(t, contractErr(t, err).Field)
	require.Contains(t, err.Error(), "limit")
}

func TestMessageKey(t *testing.T) {
	t.Parallel()
	str := func(s string) *string { return &s }
	for _, tc := range []struct {
		name    string
		traceID *string
		mode    string
		want    string
	}{
		{"trace id present", str("t-1"), passport.KeyTraceID, "t-1"},
		{"trace id nil", nil, passport.KeyTraceID, "rid"},
		{"trace id empty", str(""), passport.KeyTraceID, "rid"},
		{"route id mode", str("t-1"), passport.KeyRouteID, "rid"},
		{"empty mode is the default", str("t-1"), "", "t-1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := &passport.Passport{RouteID: "rid", TraceID: tc.traceID}
			require.Equal(t, tc.want, p.MessageKey(tc.mode))
		})
	}
}

func TestPayload(t *testing.T) {
	t.Parallel()
	t.Run("escaping and exact bytes", func(t *testing.T) {
		t.Parallel()
		p, err := passport.Parse(baseDoc().
			prop("pcp:route_name_full", `"a\"b\\c\n\u0001</é>"`).
			top1("correlationId", `null`).
			prop("sar:resolution_range", `1e-7`).
			prop("sar:resolution_azimuth", `1e21`).
			prop("pcp:roll_angles", `-0.0`).
			bytes(), passport.Limits{})
		require.NoError(t, err)
		want := `{"type":"RouteGeoRefEvent","data":{"routeId":"2f1d5b1e-6c1a-4a53-9c43-1f0b5a7e9d10",` +
			`"routeNameFull":"a\"b\\c\n\u0001</é>","routeNameShort":"R0412","kaShort":"KA-7","kaFull":"Kondor-FKA No. 7",` +
			`"orbitNumber":18342,"orbitState":"descending","intervalBegin":"2026-04-28T10:15:00Z","intervalEnd":"2026-04-28T10:16:30Z",` +
			`"rollAngle":{"min":-0,"max":-0},"visirAngle":{"min":12,"max":18.25},"resolutionRange":1e-7,"resolutionAzimuth":1e+21,` +
			`"polarisation":["HH","HV"],"processingLevel":"L1","geometry":"POLYGON((37.41 55.62,37.92 55.58,38.05 55.91,37.52 55.96,37.41 55.62))",` +
			`"routeStatus":"PROCESSED"},"traceId":"7b0b3c1e9f","correlationId":null,"group":"pcp","source":"route-processing"}`
		require.Equal(t, want, string(p.Payload(passport.EventRouteGeoRef)))
		var back struct {
			Data struct{ RouteNameFull string }
		}
		require.NoError(t, json.Unmarshal(p.Payload(passport.EventModeStatusChanged), &back))
		require.Equal(t, "a\"b\\c\n\u0001</é>", back.Data.RouteNameFull)
	})
	t.Run("hand-built passport stays JSON", func(t *testing.T) {
		t.Parallel()
		p := &passport.Passport{RouteNameFull: "bad \xff utf8", ResolutionRange: math.Inf(1)}
		pl := p.Payload(passport.EventRouteGeoRef)
		require.True(t, json.Valid(pl), "%s", pl)
		require.Contains(t, string(pl), `"polarisation":[]`)
		require.Contains(t, string(pl), `"resolutionRange":null`)
	})
}

// deepNames nests n objects, each with one member of the given name,
// around an object with a duplicate name "a".
func deepNames(n int, name string) string {
	return strings.Repeat(`{"`+name+`":`, n) + `{"a":1,"a":2}` + strings.Repeat("}", n)
}

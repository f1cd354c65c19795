package passportgen

// This file is longer than most: it is one generator of realistic passports
// (shapes, sizes, field distributions) whose parts only make sense together.

import (
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
)

// NewRand returns the deterministic random source that every function of
// the package takes: the same seed gives the same values.
func NewRand(seed uint64) *rand.Rand {
	return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}

// Record is one generated valid input record and the facts a test checks
// the service's output against.
type Record struct {
	// Key is the input record key: the trace id, a producer's own id, or nil.
	Key []byte
	// Value is the envelope of contract §1.1, UTF-8 JSON.
	Value []byte
	// ID is data.id.
	ID string
	// RouteID is the routeId the service must use: data.properties
	// ["pcp:route_id"] in lower case, or Java's UUID.nameUUIDFromBytes(ID).
	RouteID string
	// TraceID and CorrelationID are the envelope's ids; "" when missing,
	// null or empty.
	TraceID       string
	CorrelationID string
	// GeometryType is "Polygon" or "MultiPolygon"; Positions counts every
	// position of the geometry, closing ones included.
	GeometryType string
	Positions    int
}

// OutputKey is the output record key in the default OUTBOX_MESSAGE_KEY
// mode (traceId): the trace id, or the route id when it is missing or empty.
func (r Record) OutputKey() string {
	if r.TraceID != "" {
		return r.TraceID
	}
	return r.RouteID
}

// Valid returns a random valid record (contract §1).
func Valid(rng *rand.Rand) Record {
	rec, env := valid(rng)
	rec.Value = encode(make([]byte, 0, 1024+rec.Positions*24), env)
	return rec
}

// NameUUIDFromBytes is Java's UUID.nameUUIDFromBytes: the MD5 of name with
// the version set to 3 and the IETF variant, in lower-case canonical form.
// The service derives a routeId with it when pcp:route_id is absent.
func NameUUIDFromBytes(name []byte) string {
	h := md5.Sum(name)
	h[6] = h[6]&0x0f | 0x30
	h[8] = h[8]&0x3f | 0x80
	return formatUUID(h)
}

func formatUUID(u [16]byte) string {
	var b [36]byte
	hex.Encode(b[0:8], u[0:4])
	b[8] = '-'
	hex.Encode(b[9:13], u[4:6])
	b[13] = '-'
	hex.Encode(b[14:18], u[6:8])
	b[18] = '-'
	hex.Encode(b[19:23], u[8:10])
	b[23] = '-'
	hex.Encode(b[24:36], u[10:16])
	return string(b[:])
}

func randomUUIDv4(rng *rand.Rand) string {
	var u [16]byte
	for i := range u {
		u[i] = byte(rng.Uint32())
	}
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	return formatUUID(u)
}

type platform struct{ short, full string }

// Real spacecraft the planner schedules, plus a name in Cyrillic so that
// lengths are counted in code points, not bytes.
var platforms = []platform{
	{"KA-7", "Kondor-FKA No. 7"},
	{"KA-1", "Kondor-FKA No. 1"},
	{"RP-2", "Resurs-P No. 2"},
	{"RP-4", "Resurs-P No. 4"},
	{"OR-1", "Obzor-R No. 1"},
	{"MM-23", "Meteor-M No. 2-3"},
	{"EL-4", "Elektro-L No. 4"},
	{"S1A", "Sentinel-1A"},
	{"TSX-1", "TerraSAR-X"},
	{"ICEYE-X27", "ICEYE X27"},
	{"КФ-2", "Кондор-ФКА № 2"},
}

var (
	orbitStates      = []string{"ascending", "descending", "geostationary"}
	polarisations    = []string{"HH", "HV", "VH", "VV"}
	processingLevels = []string{"L0", "L1", "L1A", "L1B", "L2", "L2A"}
	instrumentModes  = []string{"SM", "SL", "IW", "EW", "ST"}
	zoneOffsets      = []int{0, 0, 0, 3 * 60, 5*60 + 30, -5 * 60, 9 * 60, -12 * 60, 14 * 60, 23*60 + 59, -(3*60 + 30)}
)

func pick[T any](rng *rand.Rand, s []T) T { return s[rng.IntN(len(s))] }

// chance reports true with probability p.
func chance(rng *rand.Rand, p float64) bool { return rng.Float64() < p }

// randomCase changes the letter case of s in one of four ways; the
// contract's enumerations are case-insensitive.
func randomCase(rng *rand.Rand, s string) string {
	switch rng.IntN(4) {
	case 0:
		return strings.ToLower(s)
	case 1:
		return strings.ToUpper(s)
	case 2:
		if s == "" {
			return s
		}
		return strings.ToUpper(s[:1]) + strings.ToLower(s[1:])
	}
	return s
}

func round(f float64, decimals int) float64 {
	p := math.Pow(10, float64(decimals))
	return math.Round(f*p) / p
}

// valid builds the envelope tree and the record facts.
func valid(rng *rand.Rand) (Record, obj) {
	var rec Record
	pl := pick(rng, platforms)
	orbit := rng.IntN(120_000)
	routeNo := rng.IntN(10_000)
	begin := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC).
		Add(time.Duration(rng.Int64N(int64(3 * 365 * 24 * time.Hour))))
	end := begin.Add(time.Duration(5+rng.IntN(40*60)) * time.Second)
	if chance(rng, 0.5) {
		end = end.Add(time.Duration(rng.IntN(1_000_000_000)))
	}

	rec.ID = fmt.Sprintf("%s-%s-%d-R%04d-%012x", pl.short, begin.Format("20060102"), orbit, routeNo, rng.Uint64()&0xffffffffffff)

	// Envelope ids.
	env := obj{{"type", "SURVEY_GEOREFERENCE"}}
	switch p := rng.Float64(); {
	case p < 0.70:
		rec.TraceID = randomHex(rng, 10+rng.IntN(23))
		env = env.set("traceId", rec.TraceID)
	case p < 0.85:
		env = env.set("traceId", nil)
	case p < 0.95: // absent
	default:
		env = env.set("traceId", "")
	}
	switch p := rng.Float64(); {
	case p < 0.6:
		rec.CorrelationID = "req-" + strconv.Itoa(rng.IntN(1_000_000))
		env = env.set("correlationId", rec.CorrelationID)
	case p < 0.8:
		env = env.set("correlationId", nil)
	}
	// type, group and source are ignored whatever their JSON type.
	if chance(rng, 0.03) {
		env = env.set("group", 42)
	} else {
		env = env.set("group", "pcp")
	}
	env = env.set("source", "survey-planner")

	props := obj{
		{"pcp:route_name_full", fmt.Sprintf("%s route %04d, orbit %d", pl.short, routeNo, orbit)},
		{"pcp:route_name_short", fmt.Sprintf("R%04d", routeNo)},
		{"platform", pl.short},
		{"pcp:platform_full", pl.full},
		{"constellation", strings.ToLower(strings.Fields(pl.full)[0])},
		{"sat:absolute_orbit", integerLiteral(rng, orbit)},
		{"sat:orbit_state", randomCase(rng, pick(rng, orbitStates))},
		{"start_datetime", dateTime(rng, begin)},
		{"end_datetime", dateTime(rng, end)},
		{"pcp:roll_angles", angles(rng, 45)},
		{"pcp:visir_angles", angles(rng, 60)},
		{"sar:resolution_range", round(0.5+rng.Float64()*30, 2)},
		{"sar:resolution_azimuth", round(0.5+rng.Float64()*30, 2)},
		{"sar:polarizations", polarisationList(rng)},
		{"sar:instrument_mode", pick(rng, instrumentModes)},
		{"processing:level", pick(rng, processingLevels)},
		{"datetime", nil},
	}
	switch p := rng.Float64(); {
	case p < 0.6:
		id := randomUUIDv4(rng)
		rec.RouteID = id
		if chance(rng, 0.15) {
			id = strings.ToUpper(id)
		}
		props = props.set("pcp:route_id", id)
	case p < 0.75:
		props = props.set("pcp:route_id", nil)
		rec.RouteID = NameUUIDFromBytes([]byte(rec.ID))
	default:
		rec.RouteID = NameUUIDFromBytes([]byte(rec.ID))
	}
	if chance(rng, 0.1) {
		// Forward compatibility: unknown members at any depth.
		props = props.set("pcp:extra", obj{{"note", "планировщик v2"}, {"weights", []any{1, 2.5, obj{{"deep", []any{nil, true}}}}}})
	}
	// Shuffle the properties a little: producers do not keep one order.
	if chance(rng, 0.3) {
		rng.Shuffle(len(props), func(i, j int) { props[i], props[j] = props[j], props[i] })
	}

	geom, typ, n, bbox := geometry(rng)
	rec.GeometryType, rec.Positions = typ, n

	data := obj{
		{"type", "Feature"},
		{"stac_version", "1.0.0"},
		{"stac_extensions", []any{
			"https://stac-extensions.github.io/sat/v1.0.0/schema.json",
			"https://stac-extensions.github.io/sar/v1.0.0/schema.json",
			"https://stac-extensions.github.io/processing/v1.1.0/schema.json",
		}},
		{"id", rec.ID},
		{"geometry", geom},
		{"bbox", bbox},
		{"properties", props},
		{"assets", obj{}},
		{"links", []any{}},
	}
	env = env.set("data", data)

	switch p := rng.Float64(); {
	case p < 0.5 && rec.TraceID != "":
		rec.Key = []byte(rec.TraceID)
	case p < 0.8:
		rec.Key = nil
	default:
		rec.Key = []byte(rec.ID)
	}
	return rec, env
}

func randomHex(rng *rand.Rand, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = hexDigits[rng.IntN(16)]
	}
	return string(b)
}

// integerLiteral writes n in one of the forms the contract calls an integer.
func integerLiteral(rng *rand.Rand, n int) any {
	switch p := rng.Float64(); {
	case p < 0.05:
		return num(strconv.Itoa(n) + ".0")
	case p < 0.10:
		return num(strconv.FormatFloat(float64(n), 'e', -1, 64))
	}
	return n
}

// dateTime writes t in a random offset with one of the separators, zone
// forms and fraction lengths RFC 3339 allows.
func dateTime(rng *rand.Rand, t time.Time) string {
	off := pick(rng, zoneOffsets)
	lt := t.In(time.FixedZone("", off*60))
	sep := "T"
	switch rng.IntN(10) {
	case 0:
		sep = "t"
	case 1:
		sep = " "
	}
	s := lt.Format("2006-01-02") + sep + lt.Format("15:04:05")
	if ns := lt.Nanosecond(); ns != 0 {
		// Keep every significant digit, maybe padded with zeros up to 9.
		frac := strings.TrimRight(fmt.Sprintf("%09d", ns), "0")
		if extra := 9 - len(frac); extra > 0 && chance(rng, 0.3) {
			frac += strings.Repeat("0", rng.IntN(extra+1))
		}
		s += "." + frac
	} else if chance(rng, 0.2) {
		s += "." + strings.Repeat("0", 1+rng.IntN(3))
	}
	if off == 0 {
		switch rng.IntN(3) {
		case 0:
			return s + "Z"
		case 1:
			return s + "z"
		}
	}
	sign := "+"
	if off < 0 {
		sign, off = "-", -off
	}
	return s + fmt.Sprintf("%s%02d:%02d", sign, off/60, off%60)
}

// angles is a scalar or a non-empty array of angles in [-limit, limit].
func angles(rng *rand.Rand, limit float64) any {
	one := func() float64 { return round((rng.Float64()*2-1)*limit, 2) }
	if chance(rng, 0.3) {
		return one()
	}
	n := 1 + rng.IntN(6)
	out := make([]any, n)
	for i := range out {
		out[i] = one()
	}
	return out
}

func polarisationList(rng *rand.Rand) []any {
	perm := rng.Perm(len(polarisations))
	n := rng.IntN(len(polarisations) + 1)
	out := make([]any, n)
	for i := range out {
		out[i] = randomCase(rng, polarisations[perm[i]])
	}
	return out
}

// geometry returns a GeoJSON Polygon or MultiPolygon, its type, its
// position count and a bbox (an unknown member to the contract).
func geometry(rng *rand.Rand) (obj, string, int, []any) {
	withZ := chance(rng, 0.1)
	parts := 1
	typ := "Polygon"
	if chance(rng, 0.3) {
		typ = "MultiPolygon"
		parts = 1 + rng.IntN(4)
	}
	// Radius of each part's bounding circle, in degrees.
	r := 0.02 + rng.Float64()*1.5
	// Parts sit on a row, 2.5 radii apart: their circles never touch.
	span := 2.5 * r * float64(parts-1)
	cx := -175 + r + rng.Float64()*(350-2*r-span)
	cy := -80 + r + rng.Float64()*(160-2*r)

	bb := [4]float64{math.Inf(1), math.Inf(1), math.Inf(-1), math.Inf(-1)}
	total := 0
	var polys []any
	for p := 0; p < parts; p++ {
		px := cx + 2.5*r*float64(p)
		m := vertexCount(rng)
		rmin := r * (0.4 + 0.4*rng.Float64())
		shell := ring(rng, px, cy, rmin, r, m, withZ, &bb)
		rings := []any{shell}
		total += m + 1
		// A hole only where the shell is fine enough that its inner
		// boundary stays well outside the hole (see ring).
		if m >= 8 && chance(rng, 0.15) {
			hm := 4 + rng.IntN(8)
			rings = append(rings, ring(rng, px, cy, 0.1*rmin, 0.3*rmin, hm, withZ, nil))
			total += hm + 1
		}
		polys = append(polys, rings)
	}
	var coords any = polys
	if typ == "Polygon" {
		coords = polys[0]
	}
	g := obj{{"type", typ}, {"coordinates", coords}}
	bbox := []any{round(bb[0], 6), round(bb[1], 6), round(bb[2], 6), round(bb[3], 6)}
	return g, typ, total, bbox
}

// vertexCount is the number of distinct vertices of a ring: the ring then
// has one more position (the closing one), 5–200 in all, mostly small.
func vertexCount(rng *rand.Rand) int {
	switch p := rng.Float64(); {
	case p < 0.6:
		return 4 + rng.IntN(16) // 5–20 positions
	case p < 0.9:
		return 20 + rng.IntN(60) // 21–80
	}
	return 80 + rng.IntN(120) // 81–200
}

// ring returns a closed ring of m vertices around (cx, cy) at radii in
// [rmin, rmax]. Vertex i lies at an angle inside the middle 40 % of the i-th
// of m equal sectors, so the angles strictly increase: the ring is
// star-shaped about the centre and therefore simple. Neighbours are at most
// 1.4 sectors apart, so no edge comes closer to the centre than
// rmin·cos(1.4·π/m), which is ≥ 0.85·rmin for m ≥ 8 (room for a hole).
// Coordinates are rounded to 1e-6 degrees (about 0.1 m), far below the
// spacing of neighbouring vertices.
func ring(rng *rand.Rand, cx, cy, rmin, rmax float64, m int, withZ bool, bb *[4]float64) []any {
	phase := rng.Float64() * 2 * math.Pi
	sector := 2 * math.Pi / float64(m)
	out := make([]any, 0, m+1)
	for i := 0; i < m; i++ {
		a := phase + (float64(i)+0.3+0.4*rng.Float64())*sector
		rad := rmin + (rmax-rmin)*rng.Float64()
		x := round(cx+rad*math.Cos(a), 6)
		y := round(cy+rad*math.Sin(a), 6)
		pos := []float64{x, y}
		if withZ {
			pos = append(pos, round(100+rng.Float64()*900, 1))
		}
		if bb != nil {
			bb[0], bb[1] = math.Min(bb[0], x), math.Min(bb[1], y)
			bb[2], bb[3] = math.Max(bb[2], x), math.Max(bb[3], y)
		}
		out = append(out, pos)
	}
	// Reverse half of the rings: orientation is not checked.
	if chance(rng, 0.5) {
		for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
			out[i], out[j] = out[j], out[i]
		}
	}
	return append(out, out[0])
}

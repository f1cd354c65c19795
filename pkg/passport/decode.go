package passport

// This file is longer than most: it is the one decoder of the passport
// document, field by field in the contract's order, over the spans the
// scanner found; splitting it would scatter one top-to-bottom read of §1.

import (
	"bytes"
	"crypto/md5"
	"math"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Field paths, spelled as in the input so DLQ tooling can find them.
const (
	fTraceID        = "traceId"
	fCorrelationID  = "correlationId"
	fData           = "data"
	fID             = "data.id"
	fProperties     = "data.properties"
	fRouteID        = "data.properties.pcp:route_id"
	fRouteNameFull  = "data.properties.pcp:route_name_full"
	fRouteNameShort = "data.properties.pcp:route_name_short"
	fPlatform       = "data.properties.platform"
	fPlatformFull   = "data.properties.pcp:platform_full"
	fOrbit          = "data.properties.sat:absolute_orbit"
	fOrbitState     = "data.properties.sat:orbit_state"
	fStart          = "data.properties.start_datetime"
	fEnd            = "data.properties.end_datetime"
	fRoll           = "data.properties.pcp:roll_angles"
	fVisir          = "data.properties.pcp:visir_angles"
	fResRange       = "data.properties.sar:resolution_range"
	fResAzimuth     = "data.properties.sar:resolution_azimuth"
	fPolarizations  = "data.properties.sar:polarizations"
	fLevel          = "data.properties.processing:level"
	fGeometry       = "data.geometry"
	fGeomType       = "data.geometry.type"
	fGeomCoords     = "data.geometry.coordinates"
)

// maxSafeInteger is 2^53 − 1, the largest orbit number the contract allows:
// beyond it JSON consumers that read numbers as doubles lose precision.
const maxSafeInteger = 1<<53 - 1

// decoder is the semantic pass over the spans the scanner found.
type decoder struct {
	b   []byte
	sl  *[numSlots]span
	lim Limits
	buf []byte // scratch for unescaping
}

func required(field string) *ContractError { return fieldErr(field, "is required") }

func wrongType(field, want string, got kind) *ContractError {
	return fieldErr(field, "must be "+want+", got "+got.String())
}

// passport checks the fields in the contract's table order, so that the
// first broken rule is always the same one.
func (d *decoder) passport() (*Passport, *ContractError) {
	var p Passport
	var err *ContractError
	if p.TraceID, err = d.optString(slotTraceID, fTraceID); err != nil {
		return nil, err
	}
	if p.CorrelationID, err = d.optString(slotCorrelationID, fCorrelationID); err != nil {
		return nil, err
	}
	if err = d.object(slotData, fData); err != nil {
		return nil, err
	}
	id, err := d.nameWith(slotID, fID, 0, func(sp span, field string) (string, *ContractError) {
		s, _, err := d.unescaped(sp, field)
		return s, err
	})
	if err != nil {
		return nil, err
	}
	if err = d.object(slotProperties, fProperties); err != nil {
		return nil, err
	}
	if p.RouteID, err = d.routeID(id); err != nil {
		return nil, err
	}
	if p.RouteNameFull, err = d.name(slotRouteNameFull, fRouteNameFull, 0); err != nil {
		return nil, err
	}
	if p.RouteNameShort, err = d.name(slotRouteNameShort, fRouteNameShort, 255); err != nil {
		return nil, err
	}
	if p.KaShort, err = d.name(slotPlatform, fPlatform, 64); err != nil {
		return nil, err
	}
	if p.KaFull, err = d.name(slotPlatformFull, fPlatformFull, 255); err != nil {
		return nil, err
	}
	if p.OrbitNumber, err = d.orbit(); err != nil {
		return nil, err
	}
	if p.OrbitState, err = d.orbitState(); err != nil {
		return nil, err
	}
	if p.IntervalBegin, err = d.dateTime(slotStart, fStart); err != nil {
		return nil, err
	}
	if p.IntervalEnd, err = d.dateTime(slotEnd, fEnd); err != nil {
		return nil, err
	}
	if p.IntervalEnd.Before(p.IntervalBegin) {
		return nil, fieldErr(fEnd, "must not be before start_datetime")
	}
	if p.RollAngle, err = d.angles(slotRoll, fRoll); err != nil {
		return nil, err
	}
	if p.VisirAngle, err = d.angles(slotVisir, fVisir); err != nil {
		return nil, err
	}
	if p.ResolutionRange, err = d.resolution(slotResRange, fResRange); err != nil {
		return nil, err
	}
	if p.ResolutionAzimuth, err = d.resolution(slotResAzimuth, fResAzimuth); err != nil {
		return nil, err
	}
	if p.Polarisation, err = d.polarisations(); err != nil {
		return nil, err
	}
	if p.ProcessingLevel, err = d.name(slotLevel, fLevel, 64); err != nil {
		return nil, err
	}
	if p.GeometryWKT, err = d.geometry(); err != nil {
		return nil, err
	}
	p.RouteStatus = RouteStatusProcessed
	return &p, nil
}

func (d *decoder) object(slot int, field string) *ContractError {
	switch sp := d.sl[slot]; sp.kind {
	case kObject:
		return nil
	case kAbsent:
		return required(field)
	default:
		return wrongType(field, "an object", sp.kind)
	}
}

// raw returns the bytes of a value.
func (d *decoder) raw(sp span) []byte { return d.b[sp.start:sp.end] }

// text decodes a string value the passport keeps. Escapes that stand for
// an unpaired UTF-16 surrogate are rejected: such a string cannot be
// stored or re-emitted as UTF-8 without silently changing it. So is
// \u0000: PostgreSQL's text cannot hold a NUL character, and the database
// would refuse the record (as a per-record rejection, without naming the
// field) after its retries.
func (d *decoder) text(sp span, field string) (string, *ContractError) {
	s, escaped, err := d.unescaped(sp, field)
	if err == nil && escaped && strings.IndexByte(s, 0) >= 0 {
		return "", fieldErr(field, `contains a NUL character (\u0000), which PostgreSQL cannot store`)
	}
	return s, err
}

// unescaped decodes a string value, refusing only unpaired surrogate
// escapes (no UTF-8 spells them); escaped reports whether it had escapes.
// data.id is read with it: it is never stored, and a NUL is a byte like
// any other to the MD5 of its UTF-8 that derives routeId.
func (d *decoder) unescaped(sp span, field string) (s string, escaped bool, _ *ContractError) {
	body := d.b[sp.start+1 : sp.end-1]
	if bytes.IndexByte(body, '\\') < 0 {
		return string(body), false, nil
	}
	out, lone := unescape(d.buf[:0], body)
	d.buf = out
	if lone {
		return "", true, fieldErr(field, "contains an unpaired UTF-16 surrogate escape")
	}
	return string(out), true, nil
}

// optString reads an envelope member that may be a string, null or absent.
func (d *decoder) optString(slot int, field string) (*string, *ContractError) {
	switch sp := d.sl[slot]; sp.kind {
	case kAbsent, kNull:
		return nil, nil
	case kString:
		s, err := d.text(sp, field)
		if err != nil {
			return nil, err
		}
		return &s, nil
	default:
		return nil, wrongType(field, "a string or null", sp.kind)
	}
}

// name reads a required non-empty string of at most maxLen code points
// (0: no limit). Values are not trimmed: the producer's text is kept as is,
// but a value of only white space carries no name and is refused.
func (d *decoder) name(slot int, field string, maxLen int) (string, *ContractError) {
	return d.nameWith(slot, field, maxLen, d.text)
}

// nameWith is name with the string decoded by decode.
func (d *decoder) nameWith(slot int, field string, maxLen int, decode func(span, string) (string, *ContractError)) (string, *ContractError) {
	sp := d.sl[slot]
	switch sp.kind {
	case kString:
	case kAbsent:
		return "", required(field)
	default:
		return "", wrongType(field, "a string", sp.kind)
	}
	s, err := decode(sp, field)
	if err != nil {
		return "", err
	}
	if s == "" {
		return "", fieldErr(field, "must not be empty")
	}
	if maxLen > 0 {
		if n := utf8.RuneCountInString(s); n > maxLen {
			return "", fieldErr(field, "must be at most "+strconv.Itoa(maxLen)+" characters, got "+strconv.Itoa(n))
		}
	}
	if isBlank(s) {
		return "", fieldErr(field, "must not be only white space")
	}
	return s, nil
}

func isBlank(s string) bool {
	for _, r := range s {
		if !unicode.IsSpace(r) {
			return false
		}
	}
	return true
}

// routeID returns the canonical route id, deriving it from the passport id
// the way the Java producer side does when it is absent or null.
func (d *decoder) routeID(id string) (string, *ContractError) {
	sp := d.sl[slotRouteID]
	switch sp.kind {
	case kAbsent, kNull:
		return nameUUID(id), nil
	case kString:
	default:
		return "", wrongType(fRouteID, "a UUID string", sp.kind)
	}
	s, err := d.text(sp, fRouteID)
	if err != nil {
		return "", err
	}
	u, ok := canonicalUUID(s)
	if !ok {
		return "", fieldErr(fRouteID, "must be a UUID in the canonical 8-4-4-4-12 hexadecimal form")
	}
	if u == "00000000-0000-0000-0000-000000000000" {
		return "", fieldErr(fRouteID, "must not be the nil UUID")
	}
	return u, nil
}

// canonicalUUID accepts only the 36-character hyphenated form, so that one
// route has exactly one spelling in the database.
func canonicalUUID(s string) (string, bool) {
	if len(s) != 36 {
		return "", false
	}
	var out [36]byte
	for i := 0; i < 36; i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return "", false
			}
		default:
			if hexVal(c) < 0 {
				return "", false
			}
			if c >= 'A' && c <= 'F' {
				c += 'a' - 'A'
			}
		}
		out[i] = c
	}
	return string(out[:]), true
}

// nameUUID is Java's UUID.nameUUIDFromBytes: MD5 with the version set to 3
// and the IETF variant, so both sides derive the same id for one passport.
func nameUUID(id string) string {
	h := md5.Sum([]byte(id))
	h[6] = h[6]&0x0f | 0x30
	h[8] = h[8]&0x3f | 0x80
	return formatUUID(h)
}

func formatUUID(h [16]byte) string {
	const digits = "0123456789abcdef"
	var out [36]byte
	j := 0
	for i, c := range h {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			out[j] = '-'
			j++
		}
		out[j] = digits[c>>4]
		out[j+1] = digits[c&0xf]
		j += 2
	}
	return string(out[:])
}

func (d *decoder) orbit() (int64, *ContractError) {
	sp := d.sl[slotOrbit]
	switch sp.kind {
	case kNumber:
	case kAbsent:
		return 0, required(fOrbit)
	default:
		return 0, wrongType(fOrbit, "an integer", sp.kind)
	}
	v, reason := parseOrbit(d.raw(sp))
	if reason != "" {
		return 0, fieldErr(fOrbit, reason)
	}
	return v, nil
}

// parseOrbit decides integrality on the decimal text, not on a float64,
// because 9007199254740993 and 1e400 look like integers once rounded.
func parseOrbit(b []byte) (int64, string) {
	i := 0
	neg := b[0] == '-'
	if neg {
		i++
	}
	st := i
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	intPart := b[st:i]
	var frac []byte
	if i < len(b) && b[i] == '.' {
		i++
		st = i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		frac = b[st:i]
	}
	exp := 0
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		eneg := false
		if b[i] == '+' || b[i] == '-' {
			eneg = b[i] == '-'
			i++
		}
		for ; i < len(b); i++ {
			// Saturate: any exponent this large already decides the answer.
			if exp < 1<<30 {
				exp = exp*10 + int(b[i]-'0')
			}
		}
		if eneg {
			exp = -exp
		}
	}
	n := len(intPart) + len(frac)
	at := func(k int) byte {
		if k < len(intPart) {
			return intPart[k]
		}
		return frac[k-len(intPart)]
	}
	lead := 0
	for lead < n && at(lead) == '0' {
		lead++
	}
	if lead == n {
		return 0, "" // zero, whatever its sign or exponent
	}
	trail := 0
	for at(n-1-trail) == '0' {
		trail++
	}
	// value = sig × 10^e, sig without leading or trailing zeros.
	e := exp - len(frac) + trail
	sig := n - lead - trail
	if e < 0 {
		return 0, "must be an integer, got a number with a fractional part"
	}
	if neg {
		return 0, "must not be negative"
	}
	if sig+e > 16 {
		return 0, "must be at most 2^53-1 (9007199254740991)"
	}
	var v int64
	for k := lead; k < n-trail; k++ {
		v = v*10 + int64(at(k)-'0')
	}
	for ; e > 0; e-- {
		v *= 10
	}
	if v > maxSafeInteger {
		return 0, "must be at most 2^53-1 (9007199254740991)"
	}
	return v, ""
}

// orbitState matches letter case only in ASCII: Unicode case folding would
// let "aſcending" (long s) through, which no producer means.
func (d *decoder) orbitState() (string, *ContractError) {
	sp := d.sl[slotOrbitState]
	switch sp.kind {
	case kString:
	case kAbsent:
		return "", required(fOrbitState)
	default:
		return "", wrongType(fOrbitState, "a string", sp.kind)
	}
	s, err := d.text(sp, fOrbitState)
	if err != nil {
		return "", err
	}
	for _, v := range [...]string{"ascending", "descending", "geostationary"} {
		if asciiEqualFold(s, v) {
			return v, nil
		}
	}
	return "", fieldErr(fOrbitState, "must be one of ascending, descending, geostationary")
}

func asciiEqualFold(s, t string) bool {
	if len(s) != len(t) {
		return false
	}
	for i := 0; i < len(s); i++ {
		a, b := s[i], t[i]
		if a >= 'A' && a <= 'Z' {
			a += 'a' - 'A'
		}
		if b >= 'A' && b <= 'Z' {
			b += 'a' - 'A'
		}
		if a != b {
			return false
		}
	}
	return true
}

// number reads a finite JSON number. JSON has no NaN or Infinity, but a
// literal such as 1e400 overflows float64 and is refused as non-finite.
func (d *decoder) number(sp span, field string) (float64, *ContractError) {
	f := parseFloat(d.raw(sp))
	if math.IsInf(f, 0) {
		return 0, fieldErr(field, "must be a finite number")
	}
	return f, nil
}

// parseFloat parses text the scanner already proved to be a JSON number, so
// the only possible error is overflow, which yields ±Inf.
func parseFloat(b []byte) float64 {
	f, _ := strconv.ParseFloat(string(b), 64)
	return f
}

func (d *decoder) angles(slot int, field string) (Angle, *ContractError) {
	sp := d.sl[slot]
	switch sp.kind {
	case kNumber:
		v, err := d.angle(sp, field)
		return Angle{v, v}, err
	case kArray:
	case kAbsent:
		return Angle{}, required(field)
	default:
		return Angle{}, wrongType(field, "a number or a non-empty array of numbers", sp.kind)
	}
	var a Angle
	it := newIter(d.b, sp)
	i := 0
	for el, ok := it.next(); ok; el, ok = it.next() {
		ef := field + "[" + strconv.Itoa(i) + "]"
		if el.kind != kNumber {
			return Angle{}, wrongType(ef, "a number", el.kind)
		}
		v, err := d.angle(el, ef)
		if err != nil {
			return Angle{}, err
		}
		if i == 0 || v < a.Min {
			a.Min = v
		}
		if i == 0 || v > a.Max {
			a.Max = v
		}
		i++
	}
	if i == 0 {
		return Angle{}, fieldErr(field, "must not be an empty array")
	}
	return a, nil
}

func (d *decoder) angle(sp span, field string) (float64, *ContractError) {
	v, err := d.number(sp, field)
	if err != nil {
		return 0, err
	}
	if v < -90 || v > 90 {
		return 0, fieldErr(field, "must be within [-90, 90] degrees")
	}
	return v, nil
}

func (d *decoder) resolution(slot int, field string) (float64, *ContractError) {
	sp := d.sl[slot]
	switch sp.kind {
	case kNumber:
	case kAbsent:
		return 0, required(field)
	default:
		return 0, wrongType(field, "a number", sp.kind)
	}
	v, err := d.number(sp, field)
	if err != nil {
		return 0, err
	}
	if !(v > 0) {
		return 0, fieldErr(field, "must be greater than 0")
	}
	return v, nil
}

var polarisations = [...]string{"HH", "HV", "VH", "VV"}

func (d *decoder) polarisations() ([]string, *ContractError) {
	sp := d.sl[slotPolarizations]
	switch sp.kind {
	case kArray:
	case kAbsent:
		return nil, required(fPolarizations)
	default:
		return nil, wrongType(fPolarizations, "an array", sp.kind)
	}
	out := make([]string, 0, len(polarisations))
	var seen uint8
	it := newIter(d.b, sp)
	for i := 0; ; i++ {
		el, ok := it.next()
		if !ok {
			break
		}
		ef := fPolarizations + "[" + strconv.Itoa(i) + "]"
		if el.kind != kString {
			return nil, wrongType(ef, "a string", el.kind)
		}
		s, err := d.text(el, ef)
		if err != nil {
			return nil, err
		}
		found := -1
		for j, v := range polarisations {
			if asciiEqualFold(s, v) {
				found = j
				break
			}
		}
		if found < 0 {
			return nil, fieldErr(ef, "must be one of HH, HV, VH, VV")
		}
		if seen&(1<<found) != 0 {
			return nil, fieldErr(ef, polarisations[found]+" is listed twice")
		}
		seen |= 1 << found
		out = append(out, polarisations[found])
	}
	return out, nil
}

// iter walks the elements of an array the scanner already validated, so it
// can skip values without re-checking their grammar.
type iter struct {
	b        []byte
	pos, end int
	first    bool
}

func newIter(b []byte, sp span) iter {
	return iter{b: b, pos: sp.start + 1, end: sp.end - 1, first: true}
}

func (it *iter) next() (span, bool) {
	it.skipWS()
	if it.pos >= it.end {
		return span{}, false
	}
	if !it.first {
		it.pos++ // ','
		it.skipWS()
	}
	it.first = false
	start := it.pos
	k, end := skipValue(it.b, start)
	it.pos = end
	return span{kind: k, start: start, end: end}, true
}

func (it *iter) skipWS() {
	for it.pos < it.end && isWS(it.b[it.pos]) {
		it.pos++
	}
}

// skipValue returns the kind and end of the valid JSON value at pos.
func skipValue(b []byte, pos int) (kind, int) {
	switch c := b[pos]; c {
	case '"':
		return kString, skipString(b, pos)
	case '{', '[':
		k := kObject
		if c == '[' {
			k = kArray
		}
		depth := 0
		for {
			switch b[pos] {
			case '"':
				pos = skipString(b, pos)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return k, pos + 1
				}
			}
			pos++
		}
	case 't':
		return kTrue, pos + 4
	case 'f':
		return kFalse, pos + 5
	case 'n':
		return kNull, pos + 4
	default:
		for pos < len(b) {
			switch b[pos] {
			case ',', ']', '}', ' ', '\t', '\n', '\r':
				return kNumber, pos
			}
			pos++
		}
		return kNumber, pos
	}
}

func skipString(b []byte, pos int) int {
	pos++
	for {
		switch b[pos] {
		case '\\':
			pos += 2
		case '"':
			return pos + 1
		default:
			pos++
		}
	}
}

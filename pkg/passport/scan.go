package passport

// This file is longer than most: it is one hand-written, single-pass JSON
// scanner (syntax, depth, duplicate names, escapes) on the hot path of every
// record; its state machine reads best in one place.

import (
	"strconv"
	"unicode/utf8"
)

// maxDepth caps nesting so that a hostile value cannot exhaust the stack or
// make the scanner quadratic; real passports nest about six levels deep.
const maxDepth = 512

// smallObject is the member count up to which duplicate names are found by
// comparing with every earlier name; beyond it a set keeps the check linear.
const smallObject = 32

// kind is the JSON type of a value, as far as the contract distinguishes.
type kind uint8

const (
	kAbsent kind = iota
	kObject
	kArray
	kString
	kNumber
	kTrue
	kFalse
	kNull
)

func (k kind) String() string {
	switch k {
	case kObject:
		return "an object"
	case kArray:
		return "an array"
	case kString:
		return "a string"
	case kNumber:
		return "a number"
	case kTrue, kFalse:
		return "a boolean"
	case kNull:
		return "null"
	}
	return "absent"
}

// span locates one value inside the record value; kind kAbsent means the
// member was not there.
type span struct {
	kind       kind
	start, end int
}

// slot numbers the members the semantic pass reads. The syntax pass fills
// them as it meets the members, so the semantic pass never searches.
const (
	slotTraceID = iota
	slotCorrelationID
	slotData
	slotID
	slotProperties
	slotGeometry
	slotRouteID
	slotRouteNameFull
	slotRouteNameShort
	slotPlatform
	slotPlatformFull
	slotOrbit
	slotOrbitState
	slotStart
	slotEnd
	slotRoll
	slotVisir
	slotResRange
	slotResAzimuth
	slotPolarizations
	slotLevel
	slotGeomType
	slotGeomCoords
	numSlots
)

// role tells which known object a frame is, so member names are only
// matched where they mean something (a "type" inside "bbox" is not ours).
type role uint8

const (
	roleOther role = iota
	roleEnvelope
	roleData
	roleProperties
	roleGeometry
)

// lookup maps a member name of an object with the given role to its slot
// and to the role of the member's value when that is an object.
func lookup(r role, key []byte) (int, role) {
	switch r {
	case roleEnvelope:
		switch string(key) {
		case "traceId":
			return slotTraceID, roleOther
		case "correlationId":
			return slotCorrelationID, roleOther
		case "data":
			return slotData, roleData
		}
	case roleData:
		switch string(key) {
		case "id":
			return slotID, roleOther
		case "properties":
			return slotProperties, roleProperties
		case "geometry":
			return slotGeometry, roleGeometry
		}
	case roleProperties:
		switch string(key) {
		case "pcp:route_id":
			return slotRouteID, roleOther
		case "pcp:route_name_full":
			return slotRouteNameFull, roleOther
		case "pcp:route_name_short":
			return slotRouteNameShort, roleOther
		case "platform":
			return slotPlatform, roleOther
		case "pcp:platform_full":
			return slotPlatformFull, roleOther
		case "sat:absolute_orbit":
			return slotOrbit, roleOther
		case "sat:orbit_state":
			return slotOrbitState, roleOther
		case "start_datetime":
			return slotStart, roleOther
		case "end_datetime":
			return slotEnd, roleOther
		case "pcp:roll_angles":
			return slotRoll, roleOther
		case "pcp:visir_angles":
			return slotVisir, roleOther
		case "sar:resolution_range":
			return slotResRange, roleOther
		case "sar:resolution_azimuth":
			return slotResAzimuth, roleOther
		case "sar:polarizations":
			return slotPolarizations, roleOther
		case "processing:level":
			return slotLevel, roleOther
		}
	case roleGeometry:
		switch string(key) {
		case "type":
			return slotGeomType, roleOther
		case "coordinates":
			return slotGeomCoords, roleOther
		}
	}
	return -1, roleOther
}

// keyRef is a decoded member name, either a slice of the input (no escapes)
// or of the scanner's arena (escapes decoded).
type keyRef struct {
	off, n  int
	inArena bool
}

// frame is one open object or array; it exists for duplicate detection and
// so that errors can name the path of where they were found.
type frame struct {
	isObj     bool
	hasKey    bool // the object's current member name is known
	role      role
	idx       int // current element index of an array
	keysStart int // first of this object's names in scanner.keys
	key       keyRef
	set       map[string]struct{}
}

// scanner is the syntax pass. It never allocates for a well-formed value of
// ordinary shape beyond its own stacks.
type scanner struct {
	b      []byte
	pos    int
	frames []frame
	keys   []keyRef
	arena  []byte
	slots  [numSlots]span
	// deferred is the first problem that can be pinned to a field (duplicate
	// name, invalid UTF-8). It is only reported if the value turns out to be
	// syntactically complete: a broken value is "not JSON" first.
	deferred *ContractError
}

// syntaxError marks a value that is not JSON at all; it carries no field.
type syntaxError struct {
	msg string
	pos int
}

func (s *scanner) fail(msg string) *syntaxError {
	return &syntaxError{msg: msg, pos: s.pos}
}

// scan checks the whole value. It returns a *ContractError for any problem.
func (s *scanner) scan() *ContractError {
	s.skipWS()
	if s.pos >= len(s.b) {
		return &ContractError{Reason: "record value is empty"}
	}
	if s.b[s.pos] != '{' {
		if isNullLiteral(s.b[s.pos:]) {
			return &ContractError{Reason: "record value is JSON null, not an object"}
		}
		return &ContractError{Reason: "record value is not a JSON object"}
	}
	if se := s.value(-1, roleEnvelope); se != nil {
		return &ContractError{Reason: "record value is not valid JSON: " + se.msg + " at byte offset " + strconv.Itoa(se.pos)}
	}
	s.skipWS()
	if s.pos != len(s.b) {
		return &ContractError{Reason: "record value is not valid JSON: data after the top-level object at byte offset " + strconv.Itoa(s.pos)}
	}
	return s.deferred
}

func isNullLiteral(b []byte) bool {
	if len(b) < 4 || string(b[:4]) != "null" {
		return false
	}
	for _, c := range b[4:] {
		if !isWS(c) {
			return false
		}
	}
	return true
}

func isWS(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func (s *scanner) skipWS() {
	for s.pos < len(s.b) && isWS(s.b[s.pos]) {
		s.pos++
	}
}

// value scans one value at s.pos (white space already skipped) and records
// its span in slot when slot >= 0.
func (s *scanner) value(slot int, childRole role) *syntaxError {
	if s.pos >= len(s.b) {
		return s.fail("unexpected end of input")
	}
	start := s.pos
	var k kind
	switch c := s.b[s.pos]; {
	case c == '{':
		k = kObject
		if err := s.object(childRole); err != nil {
			return err
		}
	case c == '[':
		k = kArray
		if err := s.array(); err != nil {
			return err
		}
	case c == '"':
		k = kString
		if _, err := s.str(false); err != nil {
			return err
		}
	case c == 't':
		k = kTrue
		if err := s.literal("true"); err != nil {
			return err
		}
	case c == 'f':
		k = kFalse
		if err := s.literal("false"); err != nil {
			return err
		}
	case c == 'n':
		k = kNull
		if err := s.literal("null"); err != nil {
			return err
		}
	case c == '-' || (c >= '0' && c <= '9'):
		k = kNumber
		if err := s.number(); err != nil {
			return err
		}
	default:
		return s.fail("unexpected character " + strconv.QuoteRune(rune(c)))
	}
	if slot >= 0 {
		s.slots[slot] = span{kind: k, start: start, end: s.pos}
	}
	return nil
}

func (s *scanner) literal(lit string) *syntaxError {
	if len(s.b)-s.pos < len(lit) || string(s.b[s.pos:s.pos+len(lit)]) != lit {
		return s.fail("invalid literal")
	}
	s.pos += len(lit)
	return nil
}

// number checks the RFC 8259 number grammar; its value is read later, only
// where the contract needs it.
func (s *scanner) number() *syntaxError {
	b := s.b
	if b[s.pos] == '-' {
		s.pos++
	}
	switch {
	case s.pos >= len(b):
		return s.fail("unexpected end of input in number")
	case b[s.pos] == '0':
		s.pos++
	case b[s.pos] >= '1' && b[s.pos] <= '9':
		s.pos++
		s.digits()
	default:
		return s.fail("invalid number")
	}
	if s.pos < len(b) && b[s.pos] == '.' {
		s.pos++
		if s.digits() == 0 {
			return s.fail("invalid number: no digits after the decimal point")
		}
	}
	if s.pos < len(b) && (b[s.pos] == 'e' || b[s.pos] == 'E') {
		s.pos++
		if s.pos < len(b) && (b[s.pos] == '+' || b[s.pos] == '-') {
			s.pos++
		}
		if s.digits() == 0 {
			return s.fail("invalid number: no digits in the exponent")
		}
	}
	return nil
}

func (s *scanner) digits() int {
	n := 0
	for s.pos < len(s.b) && s.b[s.pos] >= '0' && s.b[s.pos] <= '9' {
		s.pos++
		n++
	}
	return n
}

func (s *scanner) push(f frame) *syntaxError {
	if len(s.frames) >= maxDepth {
		return s.fail("nesting deeper than " + strconv.Itoa(maxDepth) + " levels")
	}
	s.frames = append(s.frames, f)
	return nil
}

func (s *scanner) pop() {
	top := len(s.frames) - 1
	if s.frames[top].isObj {
		s.keys = s.keys[:s.frames[top].keysStart]
	}
	s.frames[top] = frame{} // drop a possible set map for the GC
	s.frames = s.frames[:top]
}

func (s *scanner) object(r role) *syntaxError {
	if err := s.push(frame{isObj: true, role: r, keysStart: len(s.keys)}); err != nil {
		return err
	}
	s.pos++ // '{'
	s.skipWS()
	if s.pos < len(s.b) && s.b[s.pos] == '}' {
		s.pos++
		s.pop()
		return nil
	}
	fi := len(s.frames) - 1
	for {
		if s.pos >= len(s.b) {
			return s.fail("unexpected end of input in object")
		}
		if s.b[s.pos] != '"' {
			return s.fail("expected a member name")
		}
		s.frames[fi].hasKey = false
		k, err := s.str(true)
		if err != nil {
			return err
		}
		s.frames[fi].key = k
		s.frames[fi].hasKey = true
		if s.deferred == nil {
			s.checkDuplicate(fi, k)
		}
		s.skipWS()
		if s.pos >= len(s.b) || s.b[s.pos] != ':' {
			return s.fail("expected ':' after a member name")
		}
		s.pos++
		s.skipWS()
		slot, child := lookup(s.frames[fi].role, s.keyBytes(k))
		if err := s.value(slot, child); err != nil {
			return err
		}
		s.skipWS()
		if s.pos >= len(s.b) {
			return s.fail("unexpected end of input in object")
		}
		switch s.b[s.pos] {
		case ',':
			s.pos++
			s.skipWS()
		case '}':
			s.pos++
			s.pop()
			return nil
		default:
			return s.fail("expected ',' or '}' in object")
		}
	}
}

func (s *scanner) array() *syntaxError {
	if err := s.push(frame{}); err != nil {
		return err
	}
	s.pos++ // '['
	s.skipWS()
	if s.pos < len(s.b) && s.b[s.pos] == ']' {
		s.pos++
		s.pop()
		return nil
	}
	fi := len(s.frames) - 1
	for i := 0; ; i++ {
		s.frames[fi].idx = i
		if err := s.value(-1, roleOther); err != nil {
			return err
		}
		s.skipWS()
		if s.pos >= len(s.b) {
			return s.fail("unexpected end of input in array")
		}
		switch s.b[s.pos] {
		case ',':
			s.pos++
			s.skipWS()
		case ']':
			s.pos++
			s.pop()
			return nil
		default:
			return s.fail("expected ',' or ']' in array")
		}
	}
}

func (s *scanner) keyBytes(k keyRef) []byte {
	if k.inArena {
		return s.arena[k.off : k.off+k.n]
	}
	return s.b[k.off : k.off+k.n]
}

// checkDuplicate records a deferred error when k repeats a name of the
// object in frame fi. Names are compared decoded, so "a" and "\u0061" clash.
func (s *scanner) checkDuplicate(fi int, k keyRef) {
	f := &s.frames[fi]
	kb := s.keyBytes(k)
	if f.set == nil && len(s.keys)-f.keysStart < smallObject {
		for _, other := range s.keys[f.keysStart:] {
			if string(s.keyBytes(other)) == string(kb) {
				s.deferred = fieldErr(s.path(), "duplicate member name")
				return
			}
		}
		s.keys = append(s.keys, k)
		return
	}
	if f.set == nil {
		f.set = make(map[string]struct{}, 2*smallObject)
		for _, other := range s.keys[f.keysStart:] {
			f.set[string(s.keyBytes(other))] = struct{}{}
		}
	}
	if _, dup := f.set[string(kb)]; dup {
		s.deferred = fieldErr(s.path(), "duplicate member name")
		return
	}
	f.set[string(kb)] = struct{}{}
}

// str scans a string at s.pos. For member names it returns the decoded name.
// Invalid UTF-8 inside a string is valid JSON grammar-wise for many parsers
// but not valid JSON text (RFC 8259 §8.1); it is reported at the member that
// holds it.
func (s *scanner) str(isKey bool) (keyRef, *syntaxError) {
	b := s.b
	s.pos++ // opening quote
	start := s.pos
	escaped := false
	for {
		if s.pos >= len(b) {
			return keyRef{}, s.fail("unexpected end of input in string")
		}
		c := b[s.pos]
		switch {
		case c == '"':
			end := s.pos
			s.pos++
			if !isKey {
				return keyRef{}, nil
			}
			if !escaped {
				return keyRef{off: start, n: end - start}, nil
			}
			off := len(s.arena)
			// A lone surrogate escape is kept as its own WTF-8 bytes
			// so that distinct names stay distinct.
			s.arena, _ = unescape(s.arena, b[start:end])
			return keyRef{off: off, n: len(s.arena) - off, inArena: true}, nil
		case c == '\\':
			escaped = true
			s.pos++
			if s.pos >= len(b) {
				return keyRef{}, s.fail("unexpected end of input in string escape")
			}
			switch b[s.pos] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.pos++
			case 'u':
				if len(b)-s.pos < 5 || !isHex4(b[s.pos+1:s.pos+5]) {
					return keyRef{}, s.fail("invalid \\u escape in string")
				}
				s.pos += 5
			default:
				return keyRef{}, s.fail("invalid escape in string")
			}
		case c < 0x20:
			return keyRef{}, s.fail("unescaped control character in string")
		case c < utf8.RuneSelf:
			s.pos++
		default:
			r, size := utf8.DecodeRune(b[s.pos:])
			if r == utf8.RuneError && size == 1 && s.deferred == nil {
				what := "a string"
				if isKey {
					what = "a member name"
				}
				s.deferred = fieldErr(s.path(), "invalid UTF-8 in "+what)
			}
			s.pos += size
		}
	}
}

// path renders the position of the scanner as a dotted JSON path. An
// object whose member name is still being read ends the path there.
func (s *scanner) path() string {
	var p []byte
	for i := range s.frames {
		f := &s.frames[i]
		if f.isObj {
			if !f.hasKey {
				break
			}
			// By frame index, not len(p): a member may be named "".
			if i > 0 {
				p = append(p, '.')
			}
			p = appendName(p, s.keyBytes(f.key))
			continue
		}
		p = append(p, '[')
		p = strconv.AppendInt(p, int64(f.idx), 10)
		p = append(p, ']')
	}
	// A name that is not valid UTF-8 cannot be put in a header; the
	// reason still says what is wrong.
	if !utf8.Valid(p) {
		return ""
	}
	return string(cutPath(p))
}

// maxPathName bounds a member name in a field path. The path goes into a
// DLQ header, the exception message and the log; names come from the
// producer, and a 200,000-character one made each of them 200 KB.
const maxPathName = 128

// appendName appends name to a field path, cut after maxPathName bytes
// (at a character boundary) and marked with "…" when longer.
func appendName(p, name []byte) []byte {
	if len(name) <= maxPathName {
		return append(p, name...)
	}
	cut := maxPathName
	for cut > 0 && !utf8.RuneStart(name[cut]) {
		cut--
	}
	return append(append(p, name[:cut]...), "…"...)
}

// maxPath bounds a whole field path: 512 levels of names cut at
// maxPathName still made a 67-KB path, twice in the DLQ record's headers.
const maxPath = 1024

// cutPath keeps the first and last halves of a path longer than maxPath
// (at character boundaries), joined by "…": where the path starts and the
// member that failed.
func cutPath(p []byte) []byte {
	if len(p) <= maxPath {
		return p
	}
	const mark = "…"
	head := maxPath / 2
	for head > 0 && !utf8.RuneStart(p[head]) {
		head--
	}
	tail := len(p) - (maxPath - head - len(mark))
	for tail < len(p) && !utf8.RuneStart(p[tail]) {
		tail++
	}
	return append(append(p[:head:head], mark...), p[tail:]...)
}

func isHex4(b []byte) bool {
	for _, c := range b[:4] {
		if hexVal(c) < 0 {
			return false
		}
	}
	return true
}

func hexVal(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

func hex4(b []byte) rune {
	return rune(hexVal(b[0])<<12 | hexVal(b[1])<<8 | hexVal(b[2])<<4 | hexVal(b[3]))
}

// unescape decodes the body of a syntactically valid JSON string. It reports
// whether an escape stood for an unpaired UTF-16 surrogate: such a string has
// no Unicode meaning. The surrogate is written as its own three bytes
// (WTF-8), which callers that need text reject.
func unescape(dst, src []byte) ([]byte, bool) {
	lone := false
	for i := 0; i < len(src); {
		c := src[i]
		if c != '\\' {
			j := i + 1
			for j < len(src) && src[j] != '\\' {
				j++
			}
			dst = append(dst, src[i:j]...)
			i = j
			continue
		}
		e := src[i+1]
		i += 2
		switch e {
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r := hex4(src[i:])
			i += 4
			if r >= 0xD800 && r < 0xDC00 && i+6 <= len(src) && src[i] == '\\' && src[i+1] == 'u' {
				if r2 := hex4(src[i+2:]); r2 >= 0xDC00 && r2 < 0xE000 {
					dst = utf8.AppendRune(dst, (r-0xD800)<<10+(r2-0xDC00)+0x10000)
					i += 6
					continue
				}
			}
			if r >= 0xD800 && r < 0xE000 {
				lone = true
				dst = append(dst, 0xE0|byte(r>>12), 0x80|byte(r>>6)&0x3F, 0x80|byte(r)&0x3F)
				continue
			}
			dst = utf8.AppendRune(dst, r)
		default: // '"', '\\', '/'
			dst = append(dst, e)
		}
	}
	return dst, lone
}

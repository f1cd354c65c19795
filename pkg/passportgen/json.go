package passportgen

import (
	"strconv"
	"unicode/utf8"
)

// The generator builds each value as a small tree and encodes it itself
// rather than through encoding/json: member order stays that of a real
// producer (envelope first, then data), numbers keep the literal form chosen
// for them (12, 12.0 or 1.2e1 are all the integer 12 to the contract), and
// HostileCase can edit the tree before it is encoded.

// obj is a JSON object with members in insertion order. Duplicate names are
// kept, which is how HostileCase writes them.
type obj []member

type member struct {
	k string
	v any
}

// num is a number literal written exactly as given.
type num string

// raw is JSON text written as is (it may be invalid on purpose).
type raw string

func (o obj) get(k string) (any, bool) {
	for _, m := range o {
		if m.k == k {
			return m.v, true
		}
	}
	return nil, false
}

func (o obj) set(k string, v any) obj {
	for i := range o {
		if o[i].k == k {
			o[i].v = v
			return o
		}
	}
	return append(o, member{k, v})
}

func (o obj) del(k string) obj {
	out := o[:0]
	for _, m := range o {
		if m.k != k {
			out = append(out, m)
		}
	}
	return out
}

// encode appends the JSON text of v. Supported: obj, []any, []float64 (a
// position), string, num, raw, float64, int, int64, bool and nil.
func encode(b []byte, v any) []byte {
	switch v := v.(type) {
	case nil:
		return append(b, "null"...)
	case obj:
		b = append(b, '{')
		for i, m := range v {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, m.k)
			b = append(b, ':')
			b = encode(b, m.v)
		}
		return append(b, '}')
	case []any:
		b = append(b, '[')
		for i, e := range v {
			if i > 0 {
				b = append(b, ',')
			}
			b = encode(b, e)
		}
		return append(b, ']')
	case []float64:
		b = append(b, '[')
		for i, f := range v {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendFloat(b, f)
		}
		return append(b, ']')
	case string:
		return appendString(b, v)
	case num:
		return append(b, v...)
	case raw:
		return append(b, v...)
	case float64:
		return appendFloat(b, v)
	case int:
		return strconv.AppendInt(b, int64(v), 10)
	case int64:
		return strconv.AppendInt(b, v, 10)
	case bool:
		return strconv.AppendBool(b, v)
	}
	panic("passportgen: cannot encode " + strconv.Quote(typeName(v)))
}

func typeName(v any) string {
	switch v.(type) {
	case obj:
		return "obj"
	case []any:
		return "array"
	}
	return "unknown"
}

func appendFloat(b []byte, f float64) []byte {
	return strconv.AppendFloat(b, f, 'f', -1, 64)
}

const hexDigits = "0123456789abcdef"

// appendString writes s as a JSON string, escaping only what JSON requires.
// Invalid UTF-8 is written through unchanged, which HostileCase relies on.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
			i++
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			i++
		case c < utf8.RuneSelf:
			b = append(b, c)
			i++
		default:
			_, size := utf8.DecodeRuneInString(s[i:])
			b = append(b, s[i:i+size]...)
			i += size
		}
	}
	return append(b, '"')
}

package passport

import "bytes"

// raw_payload is jsonb (contract §3), and PostgreSQL's jsonb refuses two
// escapes that are valid JSON: \u0000 (SQLSTATE 22P05) and an unpaired
// UTF-16 surrogate (22P02). A valid passport can hold either only where
// the passport does not look (a string it keeps fails validation at that
// field): in an unknown member, which contract §1.1 says is ignored. Until
// 2026-12-07 such a passport was refused by the database and dead-lettered
// as RETRYABLE. Now raw_payload stores a copy with each of those escapes
// replaced by \ufffd, the replacement character (what a JSON decoder
// makes of an unpaired surrogate); jsonb keeps no byte-for-byte copy of
// the input anyway (it normalises white space, member order, duplicate
// names and numbers). Two member names of one object that differ only in
// such escapes become one name, and jsonb keeps the last member's value.
// The dead-letter topic and the events never see the copy.

// repairForJSONB returns value, a syntactically valid JSON text, with each
// \u0000 escape and each escape of an unpaired UTF-16 surrogate replaced
// by \ufffd, or nil when it has none. A surrogate pair stays. It visits
// only the \u in value: in valid JSON a backslash occurs only inside a
// string, so a \u is an escape unless an odd number of backslashes (an
// escaped backslash) comes before it.
func repairForJSONB(value []byte) []byte {
	var out []byte // nil until the first replacement
	copied := 0    // value[:copied] is in out
	for i := 0; ; {
		k := bytes.Index(value[i:], []byte(`\u`))
		if k < 0 {
			break
		}
		i += k
		if escapedBackslash(value, i) {
			i += 2
			continue
		}
		r := hex4(value[i+2:])
		if r >= 0xD800 && r < 0xDC00 && i+12 <= len(value) && value[i+6] == '\\' && value[i+7] == 'u' {
			if r2 := hex4(value[i+8:]); r2 >= 0xDC00 && r2 < 0xE000 {
				i += 12 // a pair: kept
				continue
			}
		}
		if r == 0 || (r >= 0xD800 && r < 0xE000) {
			out = append(out, value[copied:i]...)
			out = append(out, `\ufffd`...)
			copied = i + 6
		}
		i += 6
	}
	if out == nil {
		return nil
	}
	return append(out, value[copied:]...)
}

// escapedBackslash reports whether the backslash at value[i] is the second
// of an escaped pair: an odd number of backslashes runs before it.
func escapedBackslash(value []byte, i int) bool {
	n := 0
	for j := i - 1; j >= 0 && value[j] == '\\'; j-- {
		n++
	}
	return n%2 == 1
}

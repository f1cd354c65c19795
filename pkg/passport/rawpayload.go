package passport

import "bytes"

// raw_payload is jsonb (contract §3), and PostgreSQL's jsonb refuses two
// escapes that are valid JSON: \u0000 (SQLSTATE 22P05) and an unpaired
// UTF-16 surrogate (22P02). A valid passport can hold either only where
// the passport does not look (a string it keeps fails validation at that
// field): in an unknown member, which contract §1.1 says is ignored. Until
// 2026-12-07 such a passport was refused by the database and dead-lettered
// as RETRYABLE. Now raw_payload stores a copy with each of those escapes
// replaced by \ufffd, the replacement character, as a JSON decoder does
// with text it cannot represent; jsonb keeps no byte-for-byte copy of the
// input anyway (it normalises white space, member order, duplicate names
// and numbers). The dead-letter topic and the events never see the copy.

// repairForJSONB returns value, a syntactically valid JSON text, with each
// \u0000 escape and each escape of an unpaired UTF-16 surrogate replaced
// by \ufffd, or nil when it has none. A surrogate pair stays.
func repairForJSONB(value []byte) []byte {
	if !bytes.Contains(value, []byte(`\u`)) {
		return nil // the common case: one fast pass, nothing to repair
	}
	var out []byte // nil until the first replacement
	copied := 0    // value[:copied] is in out
	inString := false
	for i := 0; i < len(value); i++ {
		c := value[i]
		switch {
		case c == '"':
			inString = !inString
		case inString && c == '\\':
			if value[i+1] != 'u' {
				i++ // a one-character escape, \" and \\ included
				continue
			}
			r := hex4(value[i+2:])
			n := 6 // the escape's length
			if r >= 0xD800 && r < 0xDC00 && i+12 <= len(value) && value[i+6] == '\\' && value[i+7] == 'u' {
				if r2 := hex4(value[i+8:]); r2 >= 0xDC00 && r2 < 0xE000 {
					i += 11 // a pair: kept
					continue
				}
			}
			if r == 0 || (r >= 0xD800 && r < 0xE000) {
				out = append(out, value[copied:i]...)
				out = append(out, `\ufffd`...)
				copied = i + n
			}
			i += n - 1
		}
	}
	if out == nil {
		return nil
	}
	return append(out, value[copied:]...)
}

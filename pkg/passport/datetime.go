package passport

import (
	"time"
)

func (d *decoder) dateTime(slot int, field string) (time.Time, *ContractError) {
	sp := d.sl[slot]
	switch sp.kind {
	case kString:
	case kAbsent:
		return time.Time{}, required(field)
	default:
		return time.Time{}, wrongType(field, "an RFC 3339 date-time string", sp.kind)
	}
	s, err := d.text(sp, field)
	if err != nil {
		return time.Time{}, err
	}
	t, reason := parseDateTime(s)
	if reason != "" {
		return time.Time{}, fieldErr(field, reason)
	}
	return t, nil
}

// parseDateTime parses the RFC 3339 date-time production by hand: Go's
// time.Parse accepts hours 24 in offsets, commas as decimal signs and other
// forms the contract refuses, and refuses the lower-case "t" and "z" and the
// space separator that the contract allows.
func parseDateTime(s string) (time.Time, string) {
	const bad = "must be an RFC 3339 date-time with a zone offset"
	// Shortest form: 2006-01-02T15:04:05Z
	if len(s) < 20 {
		return time.Time{}, bad
	}
	year, ok1 := digitsN(s[0:4])
	month, ok2 := digitsN(s[5:7])
	day, ok3 := digitsN(s[8:10])
	hour, ok4 := digitsN(s[11:13])
	minute, ok5 := digitsN(s[14:16])
	sec, ok6 := digitsN(s[17:19])
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6) ||
		s[4] != '-' || s[7] != '-' || s[13] != ':' || s[16] != ':' {
		return time.Time{}, bad
	}
	switch s[10] {
	case 'T', 't', ' ':
	default:
		return time.Time{}, bad
	}
	if month < 1 || month > 12 || day < 1 || day > daysIn(month, year) {
		return time.Time{}, "must be a valid calendar date"
	}
	if hour > 23 || minute > 59 {
		return time.Time{}, bad
	}
	if sec > 59 {
		return time.Time{}, "must not be a leap second (:60)"
	}
	rest := s[19:]
	nsec := 0
	if rest[0] == '.' {
		n := 1
		for n < len(rest) && rest[n] >= '0' && rest[n] <= '9' {
			n++
		}
		digits := n - 1
		if digits == 0 {
			return time.Time{}, bad
		}
		if digits > 9 {
			return time.Time{}, "must have at most 9 fractional digits"
		}
		for i := 1; i < n; i++ {
			nsec = nsec*10 + int(rest[i]-'0')
		}
		for i := digits; i < 9; i++ {
			nsec *= 10
		}
		rest = rest[n:]
	}
	offset := 0
	switch {
	case rest == "Z" || rest == "z":
	case len(rest) == 6 && (rest[0] == '+' || rest[0] == '-') && rest[3] == ':':
		oh, ok1 := digitsN(rest[1:3])
		om, ok2 := digitsN(rest[4:6])
		if !ok1 || !ok2 || oh > 23 || om > 59 {
			return time.Time{}, "must have a zone offset of at most ±23:59"
		}
		offset = (oh*60 + om) * 60
		if rest[0] == '-' {
			offset = -offset
		}
	default:
		return time.Time{}, bad
	}
	t := time.Date(year, time.Month(month), day, hour, minute, sec, nsec, time.UTC).
		Add(-time.Duration(offset) * time.Second)
	// The output is UTC; a year outside 0000–9999 there has no RFC 3339
	// spelling, so the passport could not be emitted.
	if y := t.Year(); y < 0 || y > 9999 {
		return time.Time{}, "must lie between years 0000 and 9999 in UTC"
	}
	return t, ""
}

func digitsN(s string) (int, bool) {
	v := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int(c-'0')
	}
	return v, true
}

func daysIn(month, year int) int {
	switch month {
	case 2:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

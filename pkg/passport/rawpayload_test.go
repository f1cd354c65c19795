package passport_test

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pcp/route-processing/pkg/passport"
	"github.com/pcp/route-processing/pkg/record"
)

// RawPayload replaces exactly the escapes jsonb refuses (\u0000 and
// unpaired UTF-16 surrogates), in values and in member names, and leaves
// everything else byte for byte: surrogate pairs, other escapes, and text
// that only looks like an escape.
func TestRawPayloadReplacesWhatJSONBRefuses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, in, want string }{
		{"no escape", `{"a":"b"}`, `{"a":"b"}`},
		{"other escapes", `{"a":"\u0041\n\"\\\/é"}`, `{"a":"\u0041\n\"\\\/é"}`},
		{"nul", `{"a":"x\u0000y"}`, `{"a":"x\ufffdy"}`},
		{"nul before a digit", `{"a":"\u00000"}`, `{"a":"\ufffd0"}`},
		{"nul in a name", `{"\u0000":1}`, `{"\ufffd":1}`},
		{"lone high", `{"a":"\ud800"}`, `{"a":"\ufffd"}`},
		{"lone high, upper case", `{"a":"\uD800x"}`, `{"a":"\ufffdx"}`},
		{"lone low", `{"a":"\udc00"}`, `{"a":"\ufffd"}`},
		{"low then high", `{"a":"\udc00\ud800"}`, `{"a":"\ufffd\ufffd"}`},
		{"high then not low", `{"a":"\ud800\u0041"}`, `{"a":"\ufffd\u0041"}`},
		{"high then high then low", `{"a":"\ud800\ud83d\ude00"}`, `{"a":"\ufffd\ud83d\ude00"}`},
		{"pair", `{"a":"\ud83d\ude00"}`, `{"a":"\ud83d\ude00"}`},
		{"escaped backslash before u0000", `{"a":"\\u0000"}`, `{"a":"\\u0000"}`},
		{"escaped quote before nul", `{"a":"\"\u0000"}`, `{"a":"\"\ufffd"}`},
		{"several", `[{"a":"\u0000"},"\udfff",{"\ud800":"\u0000"}]`, `[{"a":"\ufffd"},"\ufffd",{"\ufffd":"\ufffd"}]`},
	} {
		acc := passport.Accepted{Source: record.Record{Value: []byte(tc.in)}}
		require.Equal(t, tc.want, string(acc.RawPayload()), tc.name)
	}
}

// For any JSON text, RawPayload is JSON text that decodes to the same
// value, with U+FFFD where a \u0000 stood (encoding/json already decodes an
// unpaired surrogate to U+FFFD), and that holds neither escape jsonb
// refuses. `go test -fuzz FuzzRawPayload ./pkg/passport` explores beyond
// the seeds.
func FuzzRawPayload(f *testing.F) {
	for _, s := range []string{`{"a":"b"}`, `{"a":"x\u0000y"}`, `{"\ud800":"\udc00\ud800"}`,
		`["\ud83d\ude00","\\u0000","\"\u0000"]`, `{"a":[1,"\u00000",{"\uD800x":null}]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if !json.Valid(in) {
			return
		}
		out := (&passport.Accepted{Source: record.Record{Value: in}}).RawPayload()
		require.True(t, json.Valid(out), "%q", out)
		want, collided := nulToReplacement(decodeJSON(t, in))
		if collided {
			// Two names that differ only in what was replaced are one name
			// now; which value stays (the last, in jsonb) is not the
			// point here.
			return
		}
		require.Equal(t, want, decodeJSON(t, out))
		require.False(t, hasRefusedEscape(out), "%q", out)
	})
}

func decodeJSON(t *testing.T, b []byte) any {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber() // numbers beyond float64 too
	var v any
	require.NoError(t, d.Decode(&v))
	return v
}

// nulToReplacement replaces each NUL in the strings and names of v; it
// reports whether two names of an object became one.
func nulToReplacement(v any) (any, bool) {
	fix := func(s string) string { return strings.ReplaceAll(s, "\x00", "\uFFFD") }
	switch v := v.(type) {
	case string:
		return fix(v), false
	case []any:
		collided := false
		for i := range v {
			var c bool
			v[i], c = nulToReplacement(v[i])
			collided = collided || c
		}
		return v, collided
	case map[string]any:
		m := make(map[string]any, len(v))
		collided := false
		for k, e := range v {
			var c bool
			m[fix(k)], c = nulToReplacement(e)
			collided = collided || c
		}
		return m, collided || len(m) < len(v)
	}
	return v, false
}

// hasRefusedEscape reports whether JSON text b holds a \u0000 escape or the
// escape of an unpaired UTF-16 surrogate, read the way PostgreSQL does.
func hasRefusedEscape(b []byte) bool {
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' {
			continue
		}
		if b[i+1] != 'u' {
			i++
			continue
		}
		r, _ := strconv.ParseUint(string(b[i+2:i+6]), 16, 16)
		switch {
		case r == 0, r >= 0xDC00 && r < 0xE000:
			return true
		case r >= 0xD800 && r < 0xDC00:
			if i+12 > len(b) || b[i+6] != '\\' || b[i+7] != 'u' {
				return true
			}
			r2, _ := strconv.ParseUint(string(b[i+8:i+12]), 16, 16)
			if r2 < 0xDC00 || r2 >= 0xE000 {
				return true
			}
			i += 6
		}
		i += 5
	}
	return false
}

package passport_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/pcp/route-processing/pkg/passport"
)

// FuzzParse checks that Parse never panics and that its two outcomes are
// consistent: a contract error with a plausible field, or a passport that
// satisfies every invariant and survives a round trip through a re-built
// envelope. encoding/json serves as an independent judge of JSON syntax.
func FuzzParse(f *testing.F) {
	entries, err := os.ReadDir(contractDir)
	require.NoError(f, err)
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(contractDir, e.Name()))
		require.NoError(f, err)
		f.Add(b)
	}
	f.Add(baseDoc().bytes())
	f.Add(baseDoc().multi(`[[` + square(10, 10, 1) + `],[` + square(20, 20, 1) + `]]`).bytes())
	f.Add(baseDoc().prop("sat:absolute_orbit", `1.8342e4`).prop("start_datetime", `"2026-04-28 10:15:00.5z"`).bytes())
	f.Add(baseDoc().data1("assets", `{"a":1,"a":2}`).bytes())
	f.Add(benchDoc())

	lim := passport.Limits{MaxValueBytes: 1 << 20, MaxPositions: 1000}
	f.Fuzz(func(t *testing.T, value []byte) {
		p, err := passport.Parse(value, lim)
		if err != nil {
			require.Nil(t, p)
			var ce *passport.ContractError
			require.True(t, errors.As(err, &ce), "%T", err)
			require.NotEmpty(t, ce.Reason)
			if ce.Field != "" {
				// Only JSON-text problems can be found in ignored members.
				require.True(t, ce.Field == "traceId" || ce.Field == "correlationId" ||
					ce.Field == "data" || strings.HasPrefix(ce.Field, "data.") ||
					strings.Contains(ce.Reason, "duplicate") || strings.Contains(ce.Reason, "UTF-8"),
					"field %q: %s", ce.Field, ce.Reason)
				require.True(t, utf8.ValidString(ce.Field))
				require.True(t, json.Valid(value), "a field was named for a value that is not JSON: %s", ce.Reason)
			} else if wellFormedObject(value) && !strings.Contains(ce.Reason, "duplicate") {
				t.Fatalf("no field named for a well-formed JSON object: %s", ce.Reason)
			}
			return
		}
		require.True(t, json.Valid(value), "accepted a value encoding/json rejects")
		checkInvariants(t, p)
		again, err := passport.Parse(rebuild(t, p), lim)
		require.NoError(t, err)
		requireSamePassport(t, p, again)
	})
}

// wellFormedObject reports whether value is a JSON object that the contract
// can only reject for a reason at some field.
func wellFormedObject(value []byte) bool {
	if !json.Valid(value) || !utf8.Valid(value) {
		return false
	}
	s := strings.TrimLeft(string(value), " \t\r\n")
	if !strings.HasPrefix(s, "{") {
		return false
	}
	depth, max, inStr, esc := 0, 0, false, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case inStr && esc:
			esc = false
		case inStr && c == '\\':
			esc = true
		case inStr && c == '"':
			inStr = false
		case inStr:
		case c == '"':
			inStr = true
		case c == '{' || c == '[':
			depth++
			if depth > max {
				max = depth
			}
		case c == '}' || c == ']':
			depth--
		}
	}
	return max <= 512
}

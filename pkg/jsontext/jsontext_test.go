package jsontext_test

import (
	"encoding/json"
	"maps"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/pcp/route-processing/pkg/jsontext"
)

// TestAppendStringReadsBackAsEncodingJSONWrites: whatever the bytes, the
// text is one valid JSON string that decodes to what encoding/json's own
// encoding of them decodes to (the same string, invalid UTF-8 replaced).
func TestAppendStringReadsBackAsEncodingJSONWrites(t *testing.T) {
	for _, s := range []string{
		"", "plain", `quote " and backslash \`, "tab\tnew\nline\rcr", "\x00\x01\x1f\x7f",
		"кириллица и 漢字 🛰", "bad \xff byte", "cut \xe2\x82", "\xed\xa0\x80 surrogate", "</script>&",
	} {
		b := jsontext.AppendString([]byte("x"), s)
		if b[0] != 'x' {
			t.Fatalf("%q: the prefix was overwritten", s)
		}
		var got, want string
		if err := json.Unmarshal(b[1:], &got); err != nil {
			t.Fatalf("%q: %s is not a JSON string: %v", s, b[1:], err)
		}
		std, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(std, &want); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("%q: decodes to %q, encoding/json's to %q", s, got, want)
		}
		if !utf8.Valid(b) {
			t.Errorf("%q: %q is not valid UTF-8, which jsonb refuses", s, b)
		}
	}
}

// TestAppendStringBytes pins the text itself: encoding/json reads back
// invalid UTF-8 without complaint, jsonb does not.
func TestAppendStringBytes(t *testing.T) {
	for in, want := range map[string]string{
		"":               `""`,
		"a\"b\\c":        `"a\"b\\c"`,
		"\n\r\t\x01\x7f": `"\n\r\t\u0001` + "\x7f" + `"`,
		"é🛰":             `"é🛰"`,
		"a\xffb\xe2\x82": `"a\ufffdb\ufffd\ufffd"`,
	} {
		if got := string(jsontext.AppendString(nil, in)); got != want {
			t.Errorf("AppendString(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestAppendStrings(t *testing.T) {
	if got := string(jsontext.AppendStrings(nil, nil)); got != "[]" {
		t.Errorf("AppendStrings(nil) = %s, want []", got)
	}
	for _, ss := range [][]string{nil, {}, {"HH"}, {"HH", "V\"V", "\xff"}} {
		b := jsontext.AppendStrings(nil, ss)
		var got []string
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("%q: %s is not a JSON array: %v", ss, b, err)
		}
		if len(got) != len(ss) {
			t.Fatalf("%q: %s decodes to %q", ss, b, got)
		}
		for i := range ss {
			if want := strings.ToValidUTF8(ss[i], "\ufffd"); got[i] != want {
				t.Errorf("%q: element %d decodes to %q, want %q", ss, i, got[i], want)
			}
		}
	}
}

// TestPlainStringObject: plain objects are read, everything else is left to
// encoding/json.
func TestPlainStringObject(t *testing.T) {
	for _, c := range []struct {
		in   string
		want map[string]string // nil: not read
	}{
		{`{"type": "RouteProcessed", "eventId": "e-1"}`, map[string]string{"type": "RouteProcessed", "eventId": "e-1"}},
		{" {\n\t} ", map[string]string{}},
		{`{"a":"b","a":"c"}`, map[string]string{"a": "c"}},
		{`{"k": "кириллица"}`, map[string]string{"k": "кириллица"}},
		{`{"q": "a \"b\""}`, nil},
		{`{"c": "\u0041"}`, nil},
		{"{\"t\": \"a\tb\"}", nil},
		{"{\"u\": \"\xff\"}", nil},
		{`{"n": 1}`, nil},
		{`{"a":"b",}`, nil},
		{`{"a":"b"} {}`, nil},
		{`{"a":"b"`, nil},
		{`["a"]`, nil},
		{``, nil},
	} {
		got, ok := jsontext.PlainStringObject([]byte(c.in))
		if ok != (c.want != nil) {
			t.Errorf("%q: read %v, want %v", c.in, ok, c.want != nil)
			continue
		}
		if ok && !maps.Equal(got, c.want) {
			t.Errorf("%q: %q, want %q", c.in, got, c.want)
		}
	}
}

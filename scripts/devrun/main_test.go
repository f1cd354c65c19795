package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSampleFiles: make run sends what the README and testdata/samples
// promise — 4 valid passports (8 output events), 10 invalid ones (10 DLQ
// records), valid before invalid, and the update after them.
func TestSampleFiles(t *testing.T) {
	t.Chdir("../..") // the repository top, as make runs it
	samples, updates, err := sampleFiles()
	if err != nil {
		t.Fatal(err)
	}
	var valid, invalid int
	for i, f := range samples {
		switch base := filepath.Base(f); {
		case strings.HasPrefix(base, "valid-"):
			valid++
			if invalid > 0 {
				t.Errorf("%s (#%d) sent after an invalid sample", base, i)
			}
		case strings.HasPrefix(base, "invalid-"):
			invalid++
		}
	}
	if valid != 4 || invalid != 10 {
		t.Errorf("samples: %d valid, %d invalid, want 4 and 10:\n%s", valid, invalid, strings.Join(samples, "\n"))
	}
	if len(updates) != 1 || filepath.Base(updates[0]) != "update-valid-polygon.json" {
		t.Errorf("updates: %v, want testdata/samples/update-valid-polygon.json", updates)
	}
	for _, f := range updates {
		if _, err := os.Stat(filepath.Join("testdata/contract", strings.TrimPrefix(filepath.Base(f), "update-"))); err != nil {
			t.Errorf("%s updates a record that is not sent: %v", f, err)
		}
	}
}

// TestPrefixer: whole lines reach the console behind the tag and the log
// file without it, a line split across writes stays one line, and an
// unterminated last line is written at Close.
func TestPrefixer(t *testing.T) {
	var out bytes.Buffer
	con := &console{out: &out}
	logPath := filepath.Join(t.TempDir(), "x.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	p := con.prefixer("relay", logf)
	for _, s := range []string{"one\ntw", "o\n", "three"} {
		if _, err := p.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := out.String(), "[relay] one\n[relay] two\n"; got != want {
		t.Errorf("console before Close: %q, want %q", got, want)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if got, want := out.String(), "[relay] one\n[relay] two\n[relay] three\n"; got != want {
		t.Errorf("console: %q, want %q", got, want)
	}
	b, _ := os.ReadFile(logPath)
	if got, want := string(b), "one\ntwo\nthree\n"; got != want {
		t.Errorf("log: %q, want %q", got, want)
	}
}

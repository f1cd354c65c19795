package sqlstate_test

import (
	"testing"

	"github.com/pcp/route-processing/pkg/sqlstate"
)

func TestSchemaMissing(t *testing.T) {
	for code, want := range map[string]bool{
		"42P01": true,  // undefined_table
		"42703": true,  // undefined_column
		"42501": false, // insufficient_privilege
		"42P07": false, // duplicate_table
		"":      false,
	} {
		if got := sqlstate.SchemaMissing(code); got != want {
			t.Errorf("SchemaMissing(%q) = %v, want %v", code, got, want)
		}
	}
}

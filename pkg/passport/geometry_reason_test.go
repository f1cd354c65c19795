package passport_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pcp/route-processing/pkg/passport"
)

// The reason of an invalid geometry names the broken rule but carries no
// coordinates: reasons are logged, and payload fragments must not be.
func TestGeometryReasonHasNoCoordinates(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(filepath.Join("..", "..", "testdata", "contract", "invalid-self-intersecting.json"))
	require.NoError(t, err)
	for name, in := range map[string][]byte{
		"contract example": raw,
		"multipolygon":     baseDoc().multi(`[[[[0,0],[1,1],[1,0],[0,1],[0,0]]]]`).bytes(),
		"shifted":          baseDoc().polygon(`[[[10.25,20.5],[11.25,21.5],[11.25,20.5],[10.25,21.5],[10.25,20.5]]]`).bytes(),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := passport.Parse(in, passport.Limits{})
			ce := contractErr(t, err)
			require.Equal(t, "data.geometry", ce.Field)
			require.Contains(t, ce.Reason, "not a valid polygon by OGC simple-feature rules: ")
			require.NotContains(t, ce.Reason, "at or near")
			for _, frag := range []string{"{", "(", "0.5", "10.25", "21.5"} {
				require.NotContains(t, ce.Reason, frag, "reason %q", ce.Reason)
			}
			require.True(t, strings.HasSuffix(ce.Reason, "not simple"), "the rule is kept: %q", ce.Reason)
			t.Log(ce.Reason)
		})
	}
}

// A geometry whose validation panics inside the library (two almost
// collinear squares, found by fuzzing) is refused without the panic's
// text, which quoted two of its vertices.
func TestGeometryPanicReasonHasNoCoordinates(t *testing.T) {
	t.Parallel()
	in := baseDoc().multi(`[[[[6.37795958152644,11.959156847435239],[7.413260561781939,17.075626997267193],[5.878319516832353,17.386217291343844],[4.843018536576854,12.269747141511889],[6.37795958152644,11.959156847435239]]],` +
		`[[[6.37992835428268,11.968886546557728],[8.200314295209552,11.600537412507407],[8.797153950300004,14.550126312493457],[6.976768009373132,14.918475446543779],[6.37992835428268,11.968886546557728]]]]`).bytes()
	_, err := passport.Parse(in, passport.Limits{})
	ce := contractErr(t, err)
	require.Equal(t, "data.geometry", ce.Field)
	require.Equal(t, "data.geometry: not a valid polygon by OGC simple-feature rules: the geometry library failed to validate it", ce.Reason)
}

package passport_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pcp/route-processing/pkg/passport"
)

// Holes are judged by where they lie, not by their first position: the
// library alone accepted each "bad" case below because that position is on
// the other ring's boundary (GEOS: "Hole lies outside shell", "Holes are
// nested"). The "ok" cases touch the same way and are valid.
func TestHolesThatStartOnAnotherRing(t *testing.T) {
	t.Parallel()
	shell := `[[0,0],[10,0],[10,10],[0,10],[0,0]]`
	const outside, nested = "polygon interior ring outside of exterior ring", "polygon has nested rings"
	for _, tc := range []struct {
		name, geometry, want string
	}{
		{"hole outside, starting on the shell", poly(shell, `[[10,5],[15,4],[15,6],[10,5]]`), outside},
		{"hole outside, second hole", poly(shell, `[[2,2],[3,2],[3,3],[2,2]]`, `[[10,5],[15,4],[15,6],[10,5]]`), outside},
		{"hole around the shell", poly(`[[2,2],[8,2],[8,8],[2,8],[2,2]]`, `[[2,5],[-10,-10],[20,-10],[20,20],[-10,20],[2,5]]`), outside},
		{"hole inside a hole", poly(shell, `[[1,1],[9,1],[9,9],[1,9],[1,1]]`, `[[1,1],[3,2],[2,3],[1,1]]`), nested},
		{"hole inside a hole listed first", poly(shell, `[[1,1],[3,2],[2,3],[1,1]]`, `[[1,1],[9,1],[9,9],[1,9],[1,1]]`), nested},
		{"multipolygon member", multi([]string{`[[20,20],[21,20],[21,21],[20,20]]`}, []string{shell, `[[10,5],[15,4],[15,6],[10,5]]`}),
			"validating polygon at index 1: " + outside},

		{"hole inside, starting on the shell", poly(shell, `[[10,5],[5,4],[5,6],[10,5]]`), ""},
		{"hole inside, touching the shell mid-edge", poly(shell, `[[5,4],[10,5],[5,6],[5,4]]`), ""},
		{"hole touching the shell at its last vertex", poly(shell, `[[5,4],[5,6],[0,0],[5,4]]`), ""},
		// B lies in A's bounding box, outside A, and starts on A's edge.
		{"holes touching, one in the other's box", poly(shell, `[[1,1],[9,1],[1,9],[1,1]]`, `[[5,5],[8,7],[7,8],[5,5]]`), ""},
		{"holes touching at a corner", poly(shell, `[[2,2],[4,2],[4,4],[2,4],[2,2]]`, `[[4,4],[6,4],[6,6],[4,6],[4,4]]`), ""},
		{"multipolygon, hole touching", multi([]string{shell, `[[10,5],[5,4],[5,6],[10,5]]`}, []string{`[[20,20],[21,20],[21,21],[20,20]]`}), ""},

		// Near-degenerate, judged exactly (GEOS agrees). (-0.05,49.15) lies
		// 1e-18 inside the shell's edge: in floating point it voted
		// "outside", tying the vote, and the valid hole was refused.
		{"hole along the shell's edge, within rounding", poly(`[[0.75,49.35],[-0.45,49.05],[-0.15,47.85],[1.05,48.15],[0.75,49.35]]`,
			`[[0.75,49.35],[-0.05,49.15],[0.24,48.84],[0.75,49.35]]`), ""},
		{"the same with a triangular shell", poly(`[[0.75,49.35],[-0.45,49.05],[0.75,48.0],[0.75,49.35]]`,
			`[[0.75,49.35],[-0.05,49.15],[0.24,48.84],[0.75,49.35]]`), ""},
		// (1.4,0.2) lies inside the outer hole by less than rounding; the
		// float vote tied and the nesting passed.
		{"hole inside a hole, within rounding", poly(`[[-4.2,-4],[7.8,-4],[7.8,8],[-4.2,8],[-4.2,-4]]`,
			`[[0.8,0],[-0.2,3],[2.8,4],[3.8,1],[0.8,0]]`, `[[1.4,0.2],[2,1.4],[0.8,0],[1.4,0.2]]`), nested},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, err := passport.Parse(baseDoc().geom(tc.geometry).bytes(), passport.Limits{})
			if tc.want == "" {
				require.NoError(t, err)
				require.NotEmpty(t, p.GeometryWKT)
				return
			}
			ce := contractErr(t, err)
			require.Equal(t, "data.geometry", ce.Field)
			require.Equal(t, "data.geometry: not a valid polygon by OGC simple-feature rules: "+tc.want, ce.Reason)
		})
	}
}

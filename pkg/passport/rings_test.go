package passport_test

import (
	"fmt"
	"math"
	"strings"
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

// A geometry whose validation would compare rings pair by pair beyond the
// bound is refused, naming the field, instead of taking minutes: 3,000
// thin holes whose bounding boxes all overlap (about 36 million positions
// compared; the library took 5.6 s for 4,000 and 22 s for 8,000). The same
// kind of geometry with 300 holes, and many rings whose boxes do not
// overlap, are validated as before.
func TestRingPairWorkIsBounded(t *testing.T) {
	t.Parallel()
	shell := `[[-180,0],[180,0],[180,89],[-180,89],[-180,0]]`
	slivers := func(n int) []string {
		holes := make([]string, n)
		for i := range holes {
			x := -170 + 0.01*float64(i)
			holes[i] = fmt.Sprintf(`[[%g,1],[%g,81],[%g,81],[%g,1]]`, x, x+80, x+80.005, x)
		}
		return holes
	}
	grid := func(n int) []string {
		holes := make([]string, 0, n*n)
		for i := range n {
			for j := range n {
				x, y := -170+float64(i)*3, 2+float64(j)*0.8
				holes = append(holes, fmt.Sprintf(`[[%g,%g],[%g,%g],[%g,%g],[%g,%g]]`, x, y, x+1, y, x+1, y+0.5, x, y))
			}
		}
		return holes
	}
	memberSlivers := func(n int) []string {
		members := make([]string, n)
		for i := range members {
			x := -170 + 0.01*float64(i)
			members[i] = fmt.Sprintf(`[[%g,1],[%g,81],[%g,81],[%g,1]]`, x, x+80, x+80.005, x)
		}
		return members
	}
	for _, tc := range []struct {
		name     string
		geometry string
		refused  bool
	}{
		{"3,000 overlapping holes", poly(append([]string{shell}, slivers(3000)...)...), true},
		{"300 overlapping holes", poly(append([]string{shell}, slivers(300)...)...), false},
		{"2,500 holes, boxes apart", poly(append([]string{shell}, grid(50)...)...), false},
		{"3,000 overlapping multipolygon members", multiOf(memberSlivers(3000)), true},
		{"1,500 overlapping multipolygon members", multiOf(memberSlivers(1500)), false},
		// A coastline and its islands.
		{"a 10,000-position member and 1,000 islands in its box", coastAndIslands(10_000, 1_000), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			value := baseDoc().geom(tc.geometry).bytes()
			require.Less(t, len(value), 1<<20)
			_, err := passport.Parse(value, passport.Limits{})
			if !tc.refused {
				require.NoError(t, err)
				return
			}
			ce := contractErr(t, err)
			require.Equal(t, "data.geometry", ce.Field)
			require.Contains(t, ce.Reason, "too complex to validate")
		})
	}
}

func poly(rings ...string) string {
	return `{"type":"Polygon","coordinates":[` + strings.Join(rings, ",") + `]}`
}

// multi takes each member's rings.
func multi(members ...[]string) string {
	ps := make([]string, len(members))
	for i, m := range members {
		ps[i] = "[" + strings.Join(m, ",") + "]"
	}
	return `{"type":"MultiPolygon","coordinates":[` + strings.Join(ps, ",") + `]}`
}

// multiOf makes each ring a member of its own.
func multiOf(rings []string) string {
	members := make([][]string, len(rings))
	for i, r := range rings {
		members[i] = []string{r}
	}
	return multi(members...)
}

// coastAndIslands is a round member of n positions around (0, 0) and k
// triangular islands inside its bounding box but outside it (in the
// corners).
func coastAndIslands(n, k int) string {
	var coast strings.Builder
	coast.WriteString("[")
	for i := range n {
		a := 2 * math.Pi * float64(i) / float64(n)
		fmt.Fprintf(&coast, "[%.9f,%.9f],", 40*math.Cos(a), 40*math.Sin(a))
	}
	coast.WriteString("[40,0]]")
	members := [][]string{{coast.String()}}
	for i := range k {
		x, y := -39.9+float64(i%25)*0.2, -39.9+float64(i/25)*0.2 // the lower-left corner, outside the circle
		if math.Hypot(x+0.1, y+0.1) < 41 {
			x, y = 39.9-float64(i%25)*0.2, 39.9-float64(i/25)*0.2
		}
		members = append(members, []string{fmt.Sprintf(`[[%g,%g],[%g,%g],[%g,%g],[%g,%g]]`, x, y, x+0.1, y, x, y+0.1, x, y)})
	}
	return multi(members...)
}

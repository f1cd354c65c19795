package passport_test

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pcp/route-processing/pkg/passport"
)

// A geometry whose validation would compare rings pair by pair beyond the
// bound is refused, naming the field, instead of taking minutes: 3,000
// thin holes whose bounding boxes all overlap (about 36 million positions
// compared; the library took 5.6 s for 4,000 and 22 s for 8,000), and as
// many thin members. The same kinds with 300 holes or 1,500 members, many
// rings whose boxes do not overlap, and a coastline with its islands are
// validated as before.
func TestRingPairWorkIsBounded(t *testing.T) {
	t.Parallel()
	shell := `[[-180,0],[180,0],[180,89],[-180,89],[-180,0]]`
	// n thin triangles whose bounding boxes all overlap: holes of the
	// shell, or members of their own.
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
	for _, tc := range []struct {
		name     string
		geometry string
		refused  bool
	}{
		{"3,000 overlapping holes", poly(append([]string{shell}, slivers(3000)...)...), true},
		{"300 overlapping holes", poly(append([]string{shell}, slivers(300)...)...), false},
		{"2,500 holes, boxes apart", poly(append([]string{shell}, grid(50)...)...), false},
		{"3,000 overlapping multipolygon members", multiOf(slivers(3000)), true},
		{"1,500 overlapping multipolygon members", multiOf(slivers(1500)), false},
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

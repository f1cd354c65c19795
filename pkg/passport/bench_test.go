package passport_test

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pcp/route-processing/pkg/passport"
)

// benchDoc is a typical passport: about 2 KB, pretty-printed like the
// producer's examples, with a 20-vertex footprint.
func benchDoc() []byte {
	var ring []string
	for i := 0; i < 20; i++ {
		a := 2 * math.Pi * float64(i) / 20
		ring = append(ring, fmt.Sprintf("\n          [%.6f, %.6f]", 37.7+0.3*math.Cos(a), 55.75+0.2*math.Sin(a)))
	}
	ring = append(ring, ring[0])
	return baseDoc().
		polygon("[\n        ["+strings.Join(ring, ",")+"\n        ]\n      ]").
		data1("stac_extensions", `[
      "https://stac-extensions.github.io/sat/v1.0.0/schema.json",
      "https://stac-extensions.github.io/sar/v1.0.0/schema.json",
      "https://stac-extensions.github.io/processing/v1.1.0/schema.json"
    ]`).
		bytes()
}

func BenchmarkParseAndPayloads(b *testing.B) {
	value := benchDoc()
	require.InDelta(b, 2048, len(value), 600)
	lim := passport.DefaultLimits()
	b.SetBytes(int64(len(value)))
	b.ReportAllocs()
	for b.Loop() {
		p, err := passport.Parse(value, lim)
		if err != nil {
			b.Fatal(err)
		}
		_ = p.Payload(passport.EventModeStatusChanged)
		_ = p.Payload(passport.EventRouteGeoRef)
		_ = p.MessageKey(passport.KeyTraceID)
	}
}

// BenchmarkParseComb is the costliest valid geometry the reviews found
// under the pair-work bound: a comb-shaped shell of 2,500 teeth whose
// horizontal edges lie on the line through 900 triangular holes' bases
// (200 KB). The hole checks took 5 s of it when every edge's orientation
// against such a position fell back to exact arithmetic.
func BenchmarkParseComb(b *testing.B) {
	const teeth, holes = 2500, 900
	x := func(k int) float64 { return -170 + float64(k)*0.125 }
	shell := []string{fmt.Sprintf("[%g,0]", x(0)), fmt.Sprintf("[%g,0]", x(teeth)), fmt.Sprintf("[%g,1]", x(teeth))}
	for k := teeth - 1; k >= 0; k-- {
		l, r := x(k), x(k)+0.0625
		shell = append(shell, fmt.Sprintf("[%g,1]", r), fmt.Sprintf("[%g,2]", r), fmt.Sprintf("[%g,2]", l), fmt.Sprintf("[%g,1]", l))
	}
	shell[len(shell)-1] = fmt.Sprintf("[%g,0]", x(0))
	rings := []string{"[" + strings.Join(shell, ",") + "]"}
	for h := range holes {
		l, d := x(h%teeth)+0.01, 0.00001*float64(h/teeth+1)
		rings = append(rings, fmt.Sprintf("[[%g,1],[%g,1.5],[%g,1],[%g,1]]", l+d, l+d+0.000005, l+d+0.00001, l+d))
	}
	value := baseDoc().geom(poly(rings...)).bytes()
	lim := passport.DefaultLimits()
	b.SetBytes(int64(len(value)))
	for b.Loop() {
		_, err := passport.Parse(value, lim)
		require.NoError(b, err)
	}
}

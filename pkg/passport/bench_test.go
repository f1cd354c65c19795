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

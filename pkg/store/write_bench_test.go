package store_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pcp/route-processing/pkg/store"
	"github.com/pcp/route-processing/pkg/testenv"
)

// BenchmarkWrite writes the same passports again and again (updates after
// the first), 500 at a time as under a backlog and 8 at a time as at 1,000
// passports/s, and reports the process's CPU per passport: the client's
// side of the ingest write, PostgreSQL running elsewhere.
//
//	go test ./pkg/store -run '^$' -bench 'BenchmarkWrite$'
func BenchmarkWrite(b *testing.B) {
	for _, n := range []int{500, 8} {
		b.Run(fmt.Sprintf("passports=%d", n), func(b *testing.B) {
			ctx := context.Background()
			s := store.NewPassports(testenv.Pool(b), 3)
			acc := generated(b, n)
			require.NoError(b, s.Write(ctx, acc))
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := testenv.ProcessCPU(b)
			for range b.N {
				if err := s.Write(ctx, acc); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64((testenv.ProcessCPU(b)-cpu0).Microseconds())/float64(b.N*len(acc)), "cpu-µs/passport")
		})
	}
}

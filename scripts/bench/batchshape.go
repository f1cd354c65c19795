package main

import (
	"fmt"
	"slices"
	"time"

	"github.com/pcp/route-processing/pkg/e2e"
)

// batchShape follows the ingestor's transactions second by second during a
// latency run: how many, and how many passports each on average. Its
// largest second shows the episodes that make the p99 at 1,000/s: the
// ingestor works off a backlog in a few large transactions, each as slow as
// its size (docs/performance.md, What the p99 at 1,000/s is made of).
type batchShape struct {
	count, sum float64 // the last sample of the batch-size histogram
	at         time.Time
	seconds    []shapeSecond
}

// shapeSecond is one interval's transactions and the passports they wrote,
// per second.
type shapeSecond struct{ txs, passports float64 }

func (s shapeSecond) mean() float64 { return s.passports / s.txs }

// sample reads the ingestor's batch-size histogram (its _count and _sum
// from one scrape) and adds the interval since the previous sample, taken
// per second (the caller samples about once a second, later when the
// machine stalls); an interval without a transaction is left out.
func (b *batchShape) sample(ing *e2e.Proc, now time.Time) {
	v, ok := ing.Metrics("route_passport_ingest_batch_size_count", "route_passport_ingest_batch_size_sum")
	if !ok {
		return
	}
	count, sum := v[0], v[1]
	if el := now.Sub(b.at).Seconds(); !b.at.IsZero() && count > b.count && el > 0 {
		b.seconds = append(b.seconds, shapeSecond{txs: (count - b.count) / el, passports: (sum - b.sum) / el})
	}
	b.count, b.sum, b.at = count, sum, now
}

func (b *batchShape) String() string {
	if len(b.seconds) == 0 {
		return "ingest transactions: none seen"
	}
	byMean := slices.Clone(b.seconds)
	slices.SortFunc(byMean, func(x, y shapeSecond) int {
		switch {
		case x.mean() < y.mean():
			return -1
		case x.mean() > y.mean():
			return 1
		}
		return 0
	})
	typical, largest := byMean[len(byMean)/2], byMean[len(byMean)-1]
	return fmt.Sprintf("ingest transactions in a second: typically %.0f of %.1f passports each, at their largest %.0f of %.0f",
		typical.txs, typical.mean(), largest.txs, largest.mean())
}

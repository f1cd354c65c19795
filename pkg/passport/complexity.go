package passport

import (
	"strconv"

	"github.com/peterstace/simplefeatures/geom"
	"github.com/peterstace/simplefeatures/rtree"
)

// The library's polygon validation (simplefeatures v0.50.0) compares every
// pair of rings, and of a MultiPolygon's polygons, whose bounding boxes
// overlap, each comparison costing the positions of both. A record inside
// the size limits made of thousands of thin rings with overlapping boxes
// took minutes of CPU while every partition waited behind it; this file
// bounds that work before the library starts.

// maxRingPairWork bounds the library's pairwise comparisons of one
// geometry, in positions compared: up to about a second of CPU (2-core
// machine, 2026-12-05: 1,500 thin overlapping holes 0.9 s, a
// 99,000-position shell with 99 holes 0.7 s), the order of what one ring
// of the 100,000 positions INGEST_MAX_POSITIONS allows costs by itself. A
// passport's footprint (one ring, or a few polygons) is far below it.
const maxRingPairWork = 10_000_000

// checkRingPairWork refuses a geometry whose validation would compare more
// than maxRingPairWork positions across ring and polygon pairs. It counts
// the pairs the library will compare (overlapping boxes) without comparing
// them, and stops counting at the bound. A pair of polygons costs the
// library about a fifth as much per position as a pair of rings (it indexes
// each polygon's boundary once, where it copies both rings of every ring
// pair), plus a few positions' worth for the pair itself (measured: a
// 45,000-position member with 600 islands touching it 0.56 s, 2,000 thin
// overlapping members 0.7–1.0 s, both within the bound).
func checkRingPairWork(polys []geom.Polygon) *ContractError {
	work := 0
	sizes := make([]int, len(polys))
	boxes := make([]rtree.Box, len(polys))
	for i, p := range polys {
		rings := p.DumpRings()
		n := make([]int, len(rings))
		rb := make([]rtree.Box, len(rings))
		for k, r := range rings {
			n[k] = r.Coordinates().Length()
			sizes[i] += n[k]
			rb[k], _ = r.Envelope().AsBox() // rings are never empty here
		}
		boxes[i] = rb[0]
		if overBound(rb, n, ringPairCost, &work) {
			return tooComplex()
		}
	}
	if overBound(boxes, sizes, polygonPairCost, &work) {
		return tooComplex()
	}
	return nil
}

func ringPairCost(a, b int) int    { return a + b }
func polygonPairCost(a, b int) int { return (a+b)/5 + 3 }

// overBound adds to *work the cost of each pair of items whose boxes
// overlap, from their sizes, and reports whether it passed
// maxRingPairWork (counting stops there).
func overBound(boxes []rtree.Box, sizes []int, cost func(a, b int) int, work *int) bool {
	if len(boxes) < 2 {
		return false
	}
	items := make([]rtree.BulkItem, len(boxes))
	for i, b := range boxes {
		items[i] = rtree.BulkItem{Box: b, RecordID: i}
	}
	tree := rtree.BulkLoad(items)
	for i, b := range boxes {
		_ = tree.RangeSearch(b, func(j int) error {
			if j >= i {
				return nil
			}
			*work += cost(sizes[i], sizes[j])
			if *work > maxRingPairWork {
				return rtree.Stop
			}
			return nil
		})
		if *work > maxRingPairWork {
			return true
		}
	}
	return false
}

func tooComplex() *ContractError {
	return fieldErr(fGeometry, "too complex to validate: its rings (or polygons) overlap one another's bounding boxes in so many pairs that checking them would compare more than "+
		strconv.Itoa(maxRingPairWork)+" positions")
}

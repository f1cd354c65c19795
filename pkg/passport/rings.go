package passport

import (
	"errors"
	"strconv"

	"github.com/peterstace/simplefeatures/geom"
	"github.com/peterstace/simplefeatures/rtree"
)

// The library's polygon validation (simplefeatures v0.50.0) leaves two
// gaps, closed here:
//
//   - Whether a hole lies inside the shell, and whether two holes nest, it
//     decides from each hole's first position alone. A first position on
//     the other ring's boundary decides nothing, so a hole outside its
//     shell, around it, or inside another hole passed when it started on
//     that ring (contract §1.3 names a hole outside its shell).
//   - It compares every pair of rings, and of a MultiPolygon's polygons,
//     whose bounding boxes overlap, each comparison costing the positions
//     of both. A record inside the size limits made of thousands of thin
//     rings with overlapping boxes took minutes of CPU while every
//     partition waited behind it.

// maxRingPairWork bounds the library's pairwise comparisons of one
// geometry, in positions compared: up to about a second of CPU (2-core
// machine, 2026-12-05: 1,500 thin overlapping holes 0.9 s, a
// 99,000-position shell with 99 holes 0.7 s), the order of what one ring
// of the 100,000 positions INGEST_MAX_POSITIONS allows costs by itself. A
// passport's footprint (one ring, or a few polygons) is far below it.
const maxRingPairWork = 10_000_000

// errStop ends an R-tree search early.
var errStop = errors.New("stop")

// checkRingPairWork refuses a geometry whose validation would compare more
// than maxRingPairWork positions across ring and polygon pairs. It counts
// the pairs the library will compare (overlapping boxes) without comparing
// them, and stops counting at the bound.
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
		if pairWork(rb, n, &work) != nil {
			return tooComplex()
		}
	}
	if pairWork(boxes, sizes, &work) != nil {
		return tooComplex()
	}
	return nil
}

// pairWork adds to *work the sizes of each pair of items whose boxes
// overlap; errStop once it passes maxRingPairWork.
func pairWork(boxes []rtree.Box, sizes []int, work *int) error {
	if len(boxes) < 2 {
		return nil
	}
	items := make([]rtree.BulkItem, len(boxes))
	for i, b := range boxes {
		items[i] = rtree.BulkItem{Box: b, RecordID: i}
	}
	tree := rtree.BulkLoad(items)
	for i, b := range boxes {
		err := tree.RangeSearch(b, func(j int) error {
			if j >= i {
				return nil
			}
			if *work += sizes[i] + sizes[j]; *work > maxRingPairWork {
				return errStop
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func tooComplex() *ContractError {
	return fieldErr(fGeometry, "too complex to validate: its rings (or polygons) overlap one another's bounding boxes in so many pairs that checking them would compare more than "+
		strconv.Itoa(maxRingPairWork)+" positions")
}

// Violations in the library's words, so that a reason reads the same
// whichever check found it.
const (
	holeOutsideShell = "polygon interior ring outside of exterior ring"
	holesNested      = "polygon has nested rings"
)

// checkHoles finds a hole outside its shell or inside another hole in a
// polygon the library has validated: rings simple, and any two sharing at
// most one point. It returns the library-worded violation, "" when none.
func checkHoles(p geom.Polygon) string {
	rings := p.DumpRings()
	if len(rings) < 2 {
		return ""
	}
	boxes := make([]rtree.Box, len(rings))
	for i, r := range rings {
		boxes[i], _ = r.Envelope().AsBox()
	}
	shell := rings[0].Coordinates()
	for i := 1; i < len(rings); i++ {
		if !within(boxes[i], boxes[0]) || !inside(rings[i].Coordinates(), shell) {
			return holeOutsideShell
		}
	}
	// Only a hole whose box lies within another's can be inside it; the
	// pairs are those checkRingPairWork counted.
	items := make([]rtree.BulkItem, 0, len(rings)-1)
	for i := 1; i < len(rings); i++ {
		items = append(items, rtree.BulkItem{Box: boxes[i], RecordID: i})
	}
	tree := rtree.BulkLoad(items)
	var nested bool
	for i := 1; i < len(rings) && !nested; i++ {
		_ = tree.RangeSearch(boxes[i], func(j int) error {
			if j != i && within(boxes[i], boxes[j]) && inside(rings[i].Coordinates(), rings[j].Coordinates()) {
				nested = true
				return errStop
			}
			return nil
		})
	}
	if nested {
		return holesNested
	}
	return ""
}

func within(in, out rtree.Box) bool {
	return in.MinX >= out.MinX && in.MaxX <= out.MaxX && in.MinY >= out.MinY && in.MaxY <= out.MaxY
}

// inside reports whether ring a lies inside ring b, two rings that share
// at most one point and do not cross. All of a's positions but that one
// lie on the same side of b; the shared one may be any of a's, and
// arithmetic may put it on either side. So three distinct positions of a
// vote, positions on b's boundary abstaining: at most one of them can be
// the shared point, and the other two agree.
func inside(a, b geom.Sequence) bool {
	var seen [3]geom.XY
	votes, in := 0, 0
	for k := 0; k < a.Length() && votes < 3; k++ {
		pt := a.GetXY(k)
		dup := false
		for _, s := range seen[:votes] {
			dup = dup || s == pt
		}
		if dup {
			continue
		}
		seen[votes] = pt
		votes++
		in += sideOf(pt, b)
	}
	return in > 0
}

// sideOf is +1 when pt is inside ring, −1 outside, 0 on its boundary: the
// crossing number of a ray from pt, with the library's orientation test.
func sideOf(pt geom.XY, ring geom.Sequence) int {
	crossings := 0
	for k := 0; k+1 < ring.Length(); k++ {
		lo, hi := ring.GetXY(k), ring.GetXY(k+1)
		if lo == hi {
			continue
		}
		if lo.Y > hi.Y {
			lo, hi = hi, lo
		}
		cp := hi.Sub(lo).Cross(pt.Sub(hi))
		if cp == 0 && pt.X >= min(lo.X, hi.X) && pt.X <= max(lo.X, hi.X) && pt.Y >= lo.Y && pt.Y <= hi.Y {
			return 0
		}
		if cp < 0 && pt.Y >= lo.Y && pt.Y < hi.Y {
			crossings++
		}
	}
	if crossings%2 == 1 {
		return 1
	}
	return -1
}

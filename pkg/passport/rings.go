package passport

import (
	"errors"
	"math"
	"math/big"
	"slices"
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
		if pairWork(rb, n, ringPairCost, &work) != nil {
			return tooComplex()
		}
	}
	if pairWork(boxes, sizes, polygonPairCost, &work) != nil {
		return tooComplex()
	}
	return nil
}

func ringPairCost(a, b int) int    { return a + b }
func polygonPairCost(a, b int) int { return (a+b)/5 + 3 }

// pairWork adds to *work the cost of each pair of items whose boxes
// overlap, from their sizes; errStop once it passes maxRingPairWork.
func pairWork(boxes []rtree.Box, sizes []int, cost func(a, b int) int, work *int) error {
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
			if *work += cost(sizes[i], sizes[j]); *work > maxRingPairWork {
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
		if !within(boxes[i], boxes[0]) || side(rings[i].Coordinates(), shell) < 0 {
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
			if j != i && within(boxes[i], boxes[j]) && side(rings[i].Coordinates(), rings[j].Coordinates()) > 0 {
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

// side tells on which side of ring b ring a lies: +1 inside, −1 outside,
// 0 undecided. The two rings share at most one point and do not cross, so
// all of a's positions but that one lie on the same side of b. Distinct
// positions of a vote, each exactly (see orientation), positions on b's
// boundary abstaining, until one side leads by two: only the shared point,
// which the library may have taken for a touch though it lies a rounding
// error off b's boundary, can vote against the others. Votes that run out
// before (a triangle) decide by their sum; a sum of zero is undecided, and
// an undecided ring is not refused: the library found nothing either.
func side(a, b geom.Sequence) int {
	var seen []geom.XY
	sum := 0
	for k := 0; k < a.Length() && sum > -2 && sum < 2; k++ {
		pt := a.GetXY(k)
		if slices.Contains(seen, pt) {
			continue
		}
		seen = append(seen, pt)
		sum += sideOf(pt, b)
	}
	switch {
	case sum > 0:
		return 1
	case sum < 0:
		return -1
	}
	return 0
}

// sideOf is +1 when pt is inside ring, −1 outside, 0 on its boundary: the
// crossing number of a ray from pt, with the library's orientation test
// made exact.
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
		o := orientation(lo, hi, pt)
		if o == 0 && pt.X >= min(lo.X, hi.X) && pt.X <= max(lo.X, hi.X) && pt.Y >= lo.Y && pt.Y <= hi.Y {
			return 0
		}
		if o < 0 && pt.Y >= lo.Y && pt.Y < hi.Y {
			crossings++
		}
	}
	if crossings%2 == 1 {
		return 1
	}
	return -1
}

// orientation is the sign of (b−a)×(p−b), the library's orientation of p
// against the line from a to b (+1 left, −1 right, 0 on it), computed
// exactly: in floating point a position within rounding of an edge could
// land on the wrong side of it and outvote the others (a valid hole whose
// edge runs along its shell's was refused). The float result decides when
// Shewchuk's orient2d error bound allows, rational arithmetic otherwise,
// and always near underflow, where the bound does not hold.
func orientation(a, b, p geom.XY) int {
	l := (b.X - a.X) * (p.Y - b.Y)
	r := (b.Y - a.Y) * (p.X - b.X)
	det, mag := l-r, math.Abs(l)+math.Abs(r)
	if bound := 3.3306690738754716e-16 * mag; mag > 1e-280 {
		switch {
		case det > bound:
			return 1
		case det < -bound:
			return -1
		}
	}
	q := func(x float64) *big.Rat { return new(big.Rat).SetFloat64(x) }
	bx, by := q(b.X), q(b.Y)
	el := new(big.Rat).Mul(new(big.Rat).Sub(bx, q(a.X)), new(big.Rat).Sub(q(p.Y), by))
	er := new(big.Rat).Mul(new(big.Rat).Sub(by, q(a.Y)), new(big.Rat).Sub(q(p.X), bx))
	return el.Cmp(er)
}

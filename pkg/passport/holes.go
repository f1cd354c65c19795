package passport

import (
	"math"
	"math/big"
	"slices"

	"github.com/peterstace/simplefeatures/geom"
	"github.com/peterstace/simplefeatures/rtree"
)

// The library's polygon validation (simplefeatures v0.50.0) decides whether
// a hole lies inside the shell, and whether two holes nest, from each
// hole's first position alone. A first position on the other ring's
// boundary decides nothing, so a hole outside its shell, around it, or
// inside another hole passed when it started on that ring (contract §1.3
// names a hole outside its shell). checkHoles decides from where the hole
// lies.

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
				return rtree.Stop
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
		if pt.Y < lo.Y || pt.Y > hi.Y {
			continue // neither on the edge nor crossed by the ray
		}
		if lo.Y == hi.Y { // on it or not; a horizontal edge is never crossed
			if pt.X >= min(lo.X, hi.X) && pt.X <= max(lo.X, hi.X) {
				return 0
			}
			continue
		}
		// Only edges across pt's Y need the orientation, whose exact
		// fallback is slow: a shell whose horizontal edges lie on a line
		// through many holes' positions (a comb) took 5 s before.
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

package passport

import (
	"errors"
	"math"
	"strconv"
	"strings"

	"github.com/peterstace/simplefeatures/geom"
)

// geometry converts data.geometry to the library's 2-D WKT. The walk over
// the coordinates is ours because only it knows JSON paths; validity rules
// are the library's, bounded in cost (complexity.go) and with the holes'
// places checked again (holes.go).
func (d *decoder) geometry() (string, *ContractError) {
	switch sp := d.sl[slotGeometry]; sp.kind {
	case kObject:
	case kAbsent, kNull:
		return "", required(fGeometry)
	default:
		return "", wrongType(fGeometry, "a GeoJSON Polygon or MultiPolygon object", sp.kind)
	}
	tsp := d.sl[slotGeomType]
	switch tsp.kind {
	case kString:
	case kAbsent:
		return "", required(fGeomType)
	default:
		return "", wrongType(fGeomType, "a string", tsp.kind)
	}
	typ, err := d.text(tsp, fGeomType)
	if err != nil {
		return "", err
	}
	// GeoJSON type names are case-sensitive (RFC 7946 §1.4).
	if typ != "Polygon" && typ != "MultiPolygon" {
		return "", fieldErr(fGeomType, "must be Polygon or MultiPolygon, got "+geoJSONTypeName(typ))
	}
	csp := d.sl[slotGeomCoords]
	switch csp.kind {
	case kArray:
	case kAbsent, kNull:
		return "", required(fGeomCoords)
	default:
		return "", wrongType(fGeomCoords, "an array", csp.kind)
	}

	w := walker{b: d.b, max: d.lim.MaxPositions}
	// A position takes at least 6 bytes ("[0,0],"), so this never
	// under-allocates by more than one growth step for dense input.
	est := 2 * ((csp.end-csp.start)/6 + 1)
	if est > 2*w.max+2 {
		est = 2*w.max + 2
	}
	w.coords = make([]float64, 0, est)

	var g interface {
		Validate() error
		AppendWKT([]byte) []byte
	}
	var polys []geom.Polygon
	if typ == "Polygon" {
		poly, err := w.polygon(csp, 0)
		if err != nil {
			return "", err
		}
		g, polys = poly, []geom.Polygon{poly}
	} else {
		mp, err := w.multiPolygon(csp)
		if err != nil {
			return "", err
		}
		g, polys = mp, mp.Dump()
	}
	if err := checkRingPairWork(polys); err != nil {
		return "", err
	}
	if err := validate(g.Validate); err != nil {
		return "", invalidGeometry(withoutLocation(err.Error()))
	}
	for i, p := range polys {
		if v := checkHoles(p); v != "" {
			if typ == "MultiPolygon" {
				// As the library words a member's violation.
				v = "validating polygon at index " + strconv.Itoa(i) + ": " + v
			}
			return "", invalidGeometry(v)
		}
	}
	return string(g.AppendWKT(make([]byte, 0, 32+len(w.coords)*12))), nil
}

func invalidGeometry(reason string) *ContractError {
	return fieldErr(fGeometry, "not a valid polygon by OGC simple-feature rules: "+reason)
}

// withoutLocation drops the library's " (at or near (x y))" suffix: the
// coordinates come from the payload, and reasons end up in logs, which must
// not carry payload fragments. The rule that broke is kept.
func withoutLocation(msg string) string {
	if i := strings.Index(msg, " (at or near "); i >= 0 {
		return msg[:i]
	}
	return msg
}

// geoJSONTypeName echoes the type only when it is a GeoJSON keyword: reasons
// end up in logs and headers, and must not carry arbitrary producer text.
func geoJSONTypeName(typ string) string {
	switch typ {
	case "Point", "MultiPoint", "LineString", "MultiLineString", "GeometryCollection",
		"Feature", "FeatureCollection":
		return typ
	}
	return "another type"
}

// validate runs the library's validation and turns a panic into an error: a
// pathological geometry must end up on the DLQ, not crash-loop the consumer
// on the same record forever. The panic's value is not quoted: the
// library's ("…but got: {false {6.97 14.91} …}") carries the payload's
// coordinates, and reasons end up in logs and DLQ headers.
func validate(f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = errors.New("the geometry library failed to validate it")
		}
	}()
	return f()
}

// walker reads GeoJSON coordinates into one flat float slice shared by all
// rings, which the library keeps without copying.
type walker struct {
	b      []byte
	max    int
	count  int
	coords []float64
	rings  []geom.LineString // scratch; NewPolygon copies it
	path   [4]int
}

// pathTo renders data.geometry.coordinates followed by the first n indices.
func (w *walker) pathTo(n int) string {
	p := make([]byte, 0, len(fGeomCoords)+8*n)
	p = append(p, fGeomCoords...)
	for _, i := range w.path[:n] {
		p = append(p, '[')
		p = strconv.AppendInt(p, int64(i), 10)
		p = append(p, ']')
	}
	return string(p)
}

func (w *walker) multiPolygon(sp span) (geom.MultiPolygon, *ContractError) {
	var polys []geom.Polygon
	it := newIter(w.b, sp)
	for i := 0; ; i++ {
		el, ok := it.next()
		if !ok {
			break
		}
		w.path[0] = i
		if el.kind != kArray {
			return geom.MultiPolygon{}, wrongType(w.pathTo(1), "an array of rings", el.kind)
		}
		p, err := w.polygon(el, 1)
		if err != nil {
			return geom.MultiPolygon{}, err
		}
		polys = append(polys, p)
	}
	if len(polys) == 0 {
		return geom.MultiPolygon{}, fieldErr(fGeomCoords, "must not be empty")
	}
	return geom.NewMultiPolygon(polys), nil
}

// polygon reads an array of rings at depth lvl of the coordinates.
func (w *walker) polygon(sp span, lvl int) (geom.Polygon, *ContractError) {
	base := len(w.rings)
	it := newIter(w.b, sp)
	for i := 0; ; i++ {
		el, ok := it.next()
		if !ok {
			break
		}
		w.path[lvl] = i
		if el.kind != kArray {
			return geom.Polygon{}, wrongType(w.pathTo(lvl+1), "an array of positions", el.kind)
		}
		r, err := w.ring(el, lvl+1)
		if err != nil {
			return geom.Polygon{}, err
		}
		w.rings = append(w.rings, r)
	}
	if len(w.rings) == base {
		return geom.Polygon{}, fieldErr(w.pathTo(lvl), "must not be empty")
	}
	p := geom.NewPolygon(w.rings[base:])
	w.rings = w.rings[:base]
	return p, nil
}

func (w *walker) ring(sp span, lvl int) (geom.LineString, *ContractError) {
	start := len(w.coords)
	it := newIter(w.b, sp)
	n := 0
	for ; ; n++ {
		el, ok := it.next()
		if !ok {
			break
		}
		w.path[lvl] = n
		w.count++
		if w.count > w.max {
			return geom.LineString{}, fieldErr(fGeomCoords, "has more than "+strconv.Itoa(w.max)+" positions")
		}
		if el.kind != kArray {
			return geom.LineString{}, wrongType(w.pathTo(lvl+1), "a position array of 2 or 3 numbers", el.kind)
		}
		if err := w.position(el, lvl+1); err != nil {
			return geom.LineString{}, err
		}
	}
	switch {
	case n == 0:
		return geom.LineString{}, fieldErr(w.pathTo(lvl), "ring must not be empty")
	case n < 4:
		return geom.LineString{}, fieldErr(w.pathTo(lvl), "ring has "+strconv.Itoa(n)+" positions, at least 4 are needed")
	}
	end := len(w.coords)
	ls := geom.NewLineString(geom.NewSequence(w.coords[start:end:end], geom.DimXY))
	if !ls.IsClosed() {
		return geom.LineString{}, fieldErr(w.pathTo(lvl), "ring is not closed: its first and last positions differ")
	}
	return ls, nil
}

// position appends X and Y; a third value (altitude) is checked like any
// coordinate and then dropped, because the output is 2-D.
func (w *walker) position(sp span, lvl int) *ContractError {
	it := newIter(w.b, sp)
	k := 0
	for ; ; k++ {
		el, ok := it.next()
		if !ok {
			break
		}
		if k == 3 {
			return fieldErr(w.pathTo(lvl), "a position must have 2 or 3 numbers, got more")
		}
		w.path[lvl] = k
		if el.kind != kNumber {
			return wrongType(w.pathTo(lvl+1), "a number", el.kind)
		}
		f := parseFloat(w.b[el.start:el.end])
		switch {
		case math.IsInf(f, 0):
			return fieldErr(w.pathTo(lvl+1), "must be a finite number")
		case k == 0 && (f < -180 || f > 180):
			return fieldErr(w.pathTo(lvl+1), "longitude must be within [-180, 180]")
		case k == 1 && (f < -90 || f > 90):
			return fieldErr(w.pathTo(lvl+1), "latitude must be within [-90, 90]")
		}
		if k < 2 {
			w.coords = append(w.coords, f)
		}
	}
	if k < 2 {
		return fieldErr(w.pathTo(lvl), "a position must have 2 or 3 numbers, got "+strconv.Itoa(k))
	}
	return nil
}

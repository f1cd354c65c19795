package passportgen_test

import (
	"bytes"
	"testing"

	"github.com/pcp/route-processing/pkg/passport"
	"github.com/pcp/route-processing/pkg/passportgen"
)

func TestValidParses(t *testing.T) {
	t.Parallel()
	rng := passportgen.NewRand(1)
	types := map[string]int{}
	minPos, maxPos := 1<<30, 0
	for i := range 3000 {
		rec := passportgen.Valid(rng)
		p, err := passport.Parse(rec.Value, passport.DefaultLimits())
		if err != nil {
			t.Fatalf("record %d does not parse: %v\n%s", i, err, rec.Value)
		}
		if p.RouteID != rec.RouteID {
			t.Fatalf("record %d: routeId %s, generator says %s", i, p.RouteID, rec.RouteID)
		}
		if got, want := p.MessageKey(passport.KeyTraceID), rec.OutputKey(); got != want {
			t.Fatalf("record %d: output key %q, generator says %q", i, got, want)
		}
		types[rec.GeometryType]++
		minPos, maxPos = min(minPos, rec.Positions), max(maxPos, rec.Positions)
	}
	if types["Polygon"] == 0 || types["MultiPolygon"] == 0 {
		t.Errorf("geometry types not varied: %v", types)
	}
	if minPos > 5 || maxPos < 150 {
		t.Errorf("positions per geometry range %d–%d, want about 5–200+", minPos, maxPos)
	}
}

func TestNameUUIDFromBytes(t *testing.T) {
	t.Parallel()
	// The contract's example: Java UUID.nameUUIDFromBytes("test").
	if got := passportgen.NameUUIDFromBytes([]byte("test")); got != "098f6bcd-4621-3373-8ade-4e832627b4f6" {
		t.Fatalf("got %s", got)
	}
}

func TestDeterministic(t *testing.T) {
	t.Parallel()
	a, b := passportgen.NewRand(42), passportgen.NewRand(42)
	for i := range 500 {
		va, vb := passportgen.Valid(a), passportgen.Valid(b)
		if !bytes.Equal(va.Value, vb.Value) || !bytes.Equal(va.Key, vb.Key) {
			t.Fatalf("valid record %d differs for the same seed", i)
		}
		ka, ha := passportgen.HostileCase(a)
		kb, hb := passportgen.HostileCase(b)
		if ka != kb || !bytes.Equal(ha, hb) {
			t.Fatalf("hostile record %d differs for the same seed", i)
		}
	}
	if bytes.Equal(passportgen.Valid(passportgen.NewRand(1)).Value, passportgen.Valid(passportgen.NewRand(2)).Value) {
		t.Fatal("different seeds give the same record")
	}
}

// TestHostileMostlyRejected checks that the hostile values are what they say:
// every kind except random mutation must be a contract error, and the mix
// covers every kind.
func TestHostileMostlyRejected(t *testing.T) {
	t.Parallel()
	rng := passportgen.NewRand(7)
	kinds := map[string]int{}
	accepted := 0
	for i := range 2000 {
		kind, v := passportgen.HostileCase(rng)
		kinds[kind]++
		_, err := passport.Parse(v, passport.DefaultLimits())
		if err == nil {
			if kind != passportgen.KindMutated {
				t.Errorf("hostile record %d (%s) parses:\n%.2000s", i, kind, v)
			}
			accepted++
		}
	}
	for _, k := range []string{
		passportgen.KindMutated, passportgen.KindTruncated, passportgen.KindDeep, passportgen.KindOversized,
		passportgen.KindWrongType, passportgen.KindBadValue, passportgen.KindBadGeom, passportgen.KindBadJSON,
		passportgen.KindEmpty, passportgen.KindNotPassport,
	} {
		if kinds[k] == 0 {
			t.Errorf("kind %s never generated", k)
		}
	}
	t.Logf("kinds %v; %d of 2000 parse", kinds, accepted)
}

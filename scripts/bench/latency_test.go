package main

import (
	"testing"

	"github.com/pcp/route-processing/pkg/passport"
	"github.com/pcp/route-processing/pkg/passportgen"
)

// The latency phase finds an output's route id by a byte search: it must
// be the payload's data.routeId for every event the service renders,
// whatever the passport's strings hold.
func TestOutputRouteIDIsTheDataRouteID(t *testing.T) {
	rng := passportgen.NewRand(7)
	for i := range 200 {
		rec := passportgen.Valid(rng)
		p, err := passport.Parse(rec.Value, passport.DefaultLimits())
		if err != nil {
			t.Fatalf("passport %d: %v", i, err)
		}
		// A name that quotes the key must not be taken for it: the
		// payload escapes its quotes.
		p.RouteNameFull = `x","routeId":"not-the-route`
		for _, typ := range []string{passport.EventModeStatusChanged, passport.EventRouteGeoRef} {
			if got := outputRouteID(p.Payload(typ)); got != p.RouteID {
				t.Fatalf("passport %d, %s: outputRouteID = %q, want %q", i, typ, got, p.RouteID)
			}
		}
	}
	if got := outputRouteID([]byte(`{"data": {"routeId": "spaced"}}`)); got != "spaced" {
		t.Fatalf("a document the search misses is decoded: got %q", got)
	}
}

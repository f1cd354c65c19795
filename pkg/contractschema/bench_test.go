package contractschema_test

import (
	"testing"

	"github.com/pcp/route-processing/pkg/contractschema"
	"github.com/pcp/route-processing/pkg/passport"
)

func BenchmarkNew(b *testing.B) {
	for b.Loop() {
		if _, err := contractschema.New(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkValidateOutputRecord(b *testing.B) {
	v, err := contractschema.New()
	if err != nil {
		b.Fatal(err)
	}
	p, err := passport.Parse(readFile(b, "valid-polygon.json"), passport.DefaultLimits())
	if err != nil {
		b.Fatal(err)
	}
	rec := outputRecord(p, passport.EventRouteGeoRef, passport.KeyTraceID)
	for b.Loop() {
		if err := v.ValidateOutputRecord(rec); err != nil {
			b.Fatal(err)
		}
	}
}

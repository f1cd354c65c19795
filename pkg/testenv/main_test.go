package testenv_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/pcp/route-processing/pkg/testenv"
)

func TestMain(m *testing.M) {
	// The leak check proves that Main's teardown stops everything it
	// started (in-process broker, pools, clients). librdkafka's Go wrapper
	// keeps no goroutines after Close, so nothing needs ignoring... except
	// the pgx/puddle background closer, which ends shortly after Close and
	// goleak retries for. And one of Toxiproxy's own: a toxic's pipe
	// goroutine (toxics.(*NoopToxic).Pipe, toxiproxy v2.5.0) was once left
	// blocked on its channel after FaultProxy's Stop, in a clean-clone CI
	// run; it belongs to the library, not to a fault proxy left running.
	testenv.Main(m, testenv.VerifyNoLeaks(goleak.IgnoreCurrent(),
		goleak.IgnoreTopFunction("github.com/Shopify/toxiproxy/v2/toxics.(*NoopToxic).Pipe")))
}

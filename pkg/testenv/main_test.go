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
	// goleak retries for.
	testenv.Main(m, testenv.VerifyNoLeaks(goleak.IgnoreCurrent()))
}

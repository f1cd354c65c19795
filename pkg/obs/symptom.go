package obs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/pcp/route-processing/pkg/backoff"
	"github.com/pcp/route-processing/pkg/sqlstate"
)

// DBSymptom names a database failure in a few words, for /readyz: the kind
// of failure, never pgx's message, which names the user, the database and
// the host (whoever reaches the port reads /readyz; the log has the whole
// error). It reads the SQLSTATE through the method pgconn.PgError has, so
// that this package does not link pgx.
func DBSymptom(err error) string {
	var coded interface{ SQLState() string }
	var netErr net.Error
	var miss *backoff.MissError
	switch {
	case err == nil:
		return ""
	case errors.As(err, &miss):
		return fmt.Sprintf("no answer within %s", miss.Wait.Round(time.Millisecond))
	case errors.Is(err, context.DeadlineExceeded):
		return "no answer in time"
	case errors.As(err, &coded) && sqlstate.SchemaMissing(coded.SQLState()):
		return "schema missing or older than this build (SQLSTATE " + coded.SQLState() + "): run `ingestor migrate`"
	case errors.As(err, &coded):
		return "server error, SQLSTATE " + coded.SQLState()
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.As(err, &netErr), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNRESET):
		return "connection lost"
	}
	return "unavailable"
}

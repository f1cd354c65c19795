package relay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/pcp/route-processing/pkg/backoff"
)

// setReady records component's state for /readyz: ready when reason is "".
func (r *Relay) setReady(component, reason string) {
	if r.cfg.Readiness == nil {
		return
	}
	r.cfg.Readiness.Set(component, reason)
}

// setDBReady records whether the database answers (err nil). /readyz
// answers whoever reaches the port, so it shows the kind of failure, not
// pgx's message, which names the user, the database and the host; the log
// has the whole error. during, when not "", says what was under way.
func (r *Relay) setDBReady(during string, err error) {
	r.dbByControl.Store(false)
	reason := dbSymptom(err)
	if reason != "" && during != "" {
		reason = during + ": " + reason
	}
	r.setReady("postgres", reason)
}

// dbSymptom names a database failure in a few words. It reads the SQLSTATE
// through the method pgconn.PgError has, since this package does not link
// pgx.
func dbSymptom(err error) string {
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
	case errors.As(err, &coded) && (coded.SQLState() == "42P01" || coded.SQLState() == "42703"):
		// undefined table or column: a database never migrated, or one a
		// release behind.
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

// setKafkaReady records whether a broker answers (err nil) for readiness.
// While the relays are paused it shows ready whatever the cluster does: a
// paused relay publishes nothing, so an unreachable cluster does not make
// it unusable, and an operator who paused for a Kafka incident gets quiet
// alerts (README, Deploy). The state is shown again on resume.
func (r *Relay) setKafkaReady(err error) {
	r.kafkaMu.Lock()
	defer r.kafkaMu.Unlock()
	r.kafkaErr = err
	if r.paused.Load() {
		err = nil
	}
	reason := ""
	if err != nil {
		reason = err.Error()
	}
	r.setReady("kafka", reason)
}

// showKafkaReady applies the pause flag to the recorded cluster state.
func (r *Relay) showKafkaReady() {
	r.kafkaMu.Lock()
	err := r.kafkaErr
	r.kafkaMu.Unlock()
	r.setKafkaReady(err)
}

package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
)

// Kind says what a database error means for the caller.
type Kind int

const (
	// KindNone: no error.
	KindNone Kind = iota
	// KindUnavailable: the database as a whole cannot take writes now
	// (unreachable, shutting down, out of connections, read-only). Retry
	// the same work later; never dead-letter because of it.
	KindUnavailable
	// KindRecord: the database refused this data (a data exception, a
	// constraint violation, or a program limit such as a value too large to
	// index). Retrying the same rows will fail the same way.
	KindRecord
	// KindCanceled: the caller cancelled its context (a deadline that
	// passed is KindUnavailable: the call took too long).
	KindCanceled
	// KindConflict: the transaction lost a race with a concurrent one and
	// was rolled back (a serialization failure, 40001, which
	// default_transaction_isolation = serializable makes common, or a
	// deadlock, 40P01). Run the same work again at once: the database is
	// fine and so is the data.
	KindConflict
)

func (k Kind) String() string {
	switch k {
	case KindNone:
		return "none"
	case KindUnavailable:
		return "unavailable"
	case KindRecord:
		return "record"
	case KindCanceled:
		return "canceled"
	case KindConflict:
		return "conflict"
	}
	return "unknown"
}

// Classify tells what err means for the caller. Unknown errors count as
// KindUnavailable: when in doubt, pausing loses nothing, while dead-lettering
// a good record would.
func Classify(err error) Kind {
	if err == nil {
		return KindNone
	}
	if errors.Is(err, context.Canceled) {
		return KindCanceled
	}
	var encErr *encodeError
	if errors.As(err, &encErr) {
		return KindRecord
	}
	if code := sqlState(err); code != "" {
		return classifySQLState(code)
	}
	// No answer from the server: a failed connect, a network error, a
	// connection that closed (EOF, reset), the caller's deadline, or an
	// error pgx never sent. The database, not the record, is the problem.
	return KindUnavailable
}

// TimedOut reports whether err is a statement stopped by a time bound, not
// refused: the caller's deadline, or the server's own (SQLSTATE 57014,
// query_canceled: a statement_timeout set for the role, the database or the
// server, or an operator's pg_cancel_backend). Classify makes it
// KindUnavailable; a caller that finds the server answering may take it for
// slowness rather than an outage.
func TimedOut(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || sqlState(err) == "57014"
}

// isSerializationFailure reports whether err is PostgreSQL's
// serialization_failure (40001), which read committed never raises.
func isSerializationFailure(err error) bool {
	return sqlState(err) == "40001"
}

// sqlState is the SQLSTATE of the server's error in err's chain, "" when
// there is none (a connection error, a timeout of the caller's).
func sqlState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// classifySQLState maps SQLSTATE classes (PostgreSQL appendix A).
func classifySQLState(code string) Kind {
	if len(code) < 2 {
		return KindUnavailable
	}
	switch code {
	case "40001", "40P01": // serialization failure, deadlock detected
		return KindConflict
	}
	switch code[:2] {
	case "22", // data exception: value out of range, invalid text, \u0000 in jsonb
		"23": // integrity constraint violation
		return KindRecord
	case "54": // program limit exceeded: e.g. a value too large to index
		return KindRecord
	}
	// 08 connection exception, 25 (read-only transaction), the rest of 40
	// (40003, statement completion unknown), 53 insufficient resources, 57
	// operator intervention (admin shutdown, cannot connect now), 58 system
	// error, XX internal error, and anything else: the database, not the
	// record, is the problem.
	return KindUnavailable
}

// encodeError is a record's value that the write cannot send. Validation
// admits only values the write can encode, so it means a bug upstream; it is
// the record's fault all the same ([KindRecord]: dead-lettered, not retried
// for ever), as the server's refusal of the value would have been.
type encodeError struct{ err error }

func (e *encodeError) Error() string { return e.err.Error() }
func (e *encodeError) Unwrap() error { return e.err }

// RefusalReason describes a refusal by PostgreSQL for a dead-letter header:
// the server's message, SQLSTATE and column, never the detail (which may
// quote the data), or the write's own refusal of a value it cannot encode.
// It returns "" when err is neither.
func RefusalReason(err error) string {
	var encErr *encodeError
	if errors.As(err, &encErr) {
		return encErr.Error()
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return ""
	}
	s := fmt.Sprintf("%s (SQLSTATE %s)", pgErr.Message, pgErr.Code)
	if pgErr.ColumnName != "" {
		s += ", column " + pgErr.ColumnName
	}
	return s
}

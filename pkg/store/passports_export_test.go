package store

import (
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pcp/route-processing/pkg/passport"
)

// WriteSQL is the ingest write's statement, for the encoding tests.
const WriteSQL = writeSQL

// IdleBoundSQL is BeginWrite's idle bound, for its tests.
const IdleBoundSQL = idleBoundSQL

// WriteArgs returns the arguments of s's ingest write of accepted.
func WriteArgs(s *Passports, accepted []passport.Accepted) ([]any, error) {
	args, _, err := s.writeArgs(accepted)
	return args, err
}

// Reservation returns a reserved argument's size and value; ok is false
// when arg is not one.
func Reservation(arg any) (size int, value any, ok bool) {
	r, ok := arg.(reservation)
	if !ok {
		return 0, nil, false
	}
	size, value, _ = r.reservation()
	return size, value, true
}

// KeptBuffers returns pc's kept write buffers.
func KeptBuffers(pc *pgconn.PgConn) (send, params []byte) {
	b := buffersOf(pc)
	return b.send, b.params
}

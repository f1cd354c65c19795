package store

import (
	"github.com/jackc/pgx/v5"

	"github.com/pcp/route-processing/pkg/passport"
)

// WriteSQL is the ingest write's statement, for the encoding tests.
const WriteSQL = writeSQL

// IdleBoundSQL is BeginWrite's idle bound, for its tests.
const IdleBoundSQL = idleBoundSQL

// WriteArgs returns the arguments of s's ingest write of accepted.
func WriteArgs(s *Passports, accepted []passport.Accepted) ([]any, error) {
	b := &pgx.Batch{}
	if _, err := s.queue(b, accepted); err != nil {
		return nil, err
	}
	return b.QueuedQueries[0].Arguments, nil
}

// Reservation returns a reserved argument's size and value; ok is false
// when arg is not one.
func Reservation(arg any) (size int, value any, ok bool) {
	r, ok := arg.(reservation)
	if !ok {
		return 0, nil, false
	}
	size, value = r.reservation()
	return size, value, true
}

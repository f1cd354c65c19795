package store

import (
	"github.com/jackc/pgx/v5"

	"github.com/pcp/route-processing/pkg/passport"
)

// WriteSQL is the ingest write's statement, for the encoding tests.
const WriteSQL = writeSQL

// WriteArgs returns the arguments of the ingest write of accepted; the
// first carries the reservation.
func WriteArgs(accepted []passport.Accepted) ([]any, error) {
	b := &pgx.Batch{}
	if _, err := (&Passports{maxAttempts: 3}).queue(b, accepted); err != nil {
		return nil, err
	}
	return b.QueuedQueries[0].Arguments, nil
}

// Reservation returns a reserved argument's size and value.
func Reservation(arg any) (int, any) {
	return arg.(reservation).reservation()
}

package store

import (
	"database/sql/driver"
	"slices"

	"github.com/jackc/pgx/v5/pgtype"
)

// reserved is a query argument that makes room for a whole query's
// parameters before its own value is encoded. pgx encodes all of a query's
// parameters into one buffer that starts at 128 bytes, grows by appending
// and is dropped after the query: the ingest write of 500 passports (about
// 4 MB) grew it some forty times, allocating 21 MB. Given as the
// first argument with the size of them all, it makes that one allocation
// (BenchmarkWriteArgs). size is an estimate: too small costs the growth it
// did not avoid, too large costs memory for one query. It helps where pgx
// encodes the parameters into that shared buffer (a prepared or described
// statement, the default and exec modes), not in the simple protocol, where
// each argument gets a buffer of its own ([Passports] does not reserve
// there).
//
// T must be a concrete type: pgx memoizes the plan per argument type, and
// the plan encodes value with the plan of T it was made with. The value's
// codec must also decline a reserved, which array codecs do: pgx asks the
// parameter type's codec before any wrapper, and a codec that takes any
// driver.Valuer (json, jsonb) would encode value through Value, correctly
// but without the reservation.
//
// keep, when set, is the connection's kept parameter buffer
// ([lendBuffers]): the room is made there instead of in a new allocation.
type reserved[T any] struct {
	size  int
	value T
	keep  *[]byte
}

func (r reserved[T]) reservation() (int, any, *[]byte) { return r.size, r.value, r.keep }

// keeping returns r making its room in *keep.
func (r reserved[T]) keeping(keep *[]byte) any {
	r.keep = keep
	return r
}

// Value lets a connection whose type map lacks [wrapReserved] (a pool not
// made by [Open]) encode the value through database/sql's interface, as it
// is, without the reservation.
func (r reserved[T]) Value() (driver.Value, error) { return r.value, nil }

type reservation interface {
	reservation() (size int, value any, keep *[]byte)
	keeping(keep *[]byte) any
}

// wrapReserved is the pgtype hook that encodes a [reserved]: [Open] puts it
// first in each connection's TryWrapEncodePlanFuncs. pgx memoizes the plan
// per argument type, which is why reserved is generic: each value type gets
// its own plan.
func wrapReserved(value any) (pgtype.WrappedEncodePlanNextSetter, any, bool) {
	r, ok := value.(reservation)
	if !ok {
		return nil, nil, false
	}
	_, v, _ := r.reservation()
	return &reservePlan{}, v, true
}

type reservePlan struct{ next pgtype.EncodePlan }

func (p *reservePlan) SetNext(next pgtype.EncodePlan) { p.next = next }

func (p *reservePlan) Encode(value any, buf []byte) ([]byte, error) {
	size, v, keep := value.(reservation).reservation()
	if keep != nil {
		return p.next.Encode(v, lend(keep, buf, size))
	}
	return p.next.Encode(v, slices.Grow(buf, size))
}

// registerTypes adds this package's encode hooks to a connection's type map.
func registerTypes(m *pgtype.Map) {
	m.TryWrapEncodePlanFuncs = append([]pgtype.TryWrapEncodePlanFunc{wrapReserved}, m.TryWrapEncodePlanFuncs...)
}

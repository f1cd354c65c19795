package store

import (
	"errors"
	"slices"

	"github.com/jackc/pgx/v5/pgconn"
)

// A connection's own buffers for the ingest write. pgx encodes a query's
// parameters into one buffer and copies them into the Bind message in
// another (pgproto3's send buffer), and after the query it drops each that
// grew large (the parameters' above 256 bytes, the send buffer above 1 KB).
// A write of 500 passports is about 4.4 MB in each, so every write
// allocated some 9 MB afresh, and the first touch of each new page is a
// page fault (on the bench's paravirtualised VMs, a trap to the host).
// Instead, each connection keeps its two buffers between writes, in its
// CustomData, and lends them to pgx for its next write: BenchmarkWrite
// allocates 1.0 MB per 500-passport write instead of 16.8, and the
// process's CPU per passport fell from 39–44 µs to 10–12 (from 74–102 to
// 27–38 for 8-passport writes).
//
// Lending holds whatever pgx does with a buffer after the query: a
// connection runs one query at a time, and only that connection's queries
// get its buffers, so a buffer pgx kept would be written by the same
// connection's next query and by nothing else. io.Writer's contract lets
// the socket's writer keep no reference past Write.
//
// Only [Passports.Write] lends: it is the path of every batch that shares
// no route with a batch still writing, so of nearly every batch.
// [Passports.BeginWrite]'s connection is held by pgxpool's transaction
// until its commit, and its write only reserves its parameters ([reserved]).

// maxKeptBuffer bounds each kept buffer: an outsized write (BatchBytes
// allows 16 MiB of input, more in the parameters) allocates its own, as
// before, rather than have the connection hold that much for ever.
const maxKeptBuffer = 8 << 20

// sendSlack is the send buffer's room beyond the parameters: the Bind
// message's lengths and formats and the pipeline's other messages.
const sendSlack = 4 << 10

// buffersKey names the buffers in a connection's CustomData.
const buffersKey = "store.connBuffers"

type connBuffers struct{ send, params []byte }

// buffersOf returns pc's kept buffers.
func buffersOf(pc *pgconn.PgConn) *connBuffers {
	data := pc.CustomData()
	b, _ := data[buffersKey].(*connBuffers)
	if b == nil {
		b = &connBuffers{}
		data[buffersKey] = b
	}
	return b
}

// lendBuffers makes pc's next query, a write with args (see
// [Passports.writeArgs]), encode into pc's kept buffers, and returns the
// arguments to send it with. Without a [reserved] first argument (the
// simple protocol) it changes nothing.
func lendBuffers(pc *pgconn.PgConn, args []any) []any {
	r, ok := args[0].(reservation)
	if !ok {
		return args
	}
	size, _, _ := r.reservation()
	b := buffersOf(pc)
	pc.Frontend().Send(sendRoom{keep: &b.send, size: size + sendSlack})
	args = slices.Clone(args)
	args[0] = r.keeping(&b.params)
	return args
}

// lend returns a buffer holding dst's bytes with room for n more: *keep
// when it has the room, else a new one, which it keeps in *keep when it is
// no larger than maxKeptBuffer. dst may be *keep's own start (a buffer the
// connection's pgx still holds), which it then copies onto itself.
func lend(keep *[]byte, dst []byte, n int) []byte {
	need := len(dst) + n
	buf := *keep
	if cap(buf) < need {
		buf = make([]byte, 0, need)
		if need <= maxKeptBuffer {
			*keep = buf
		}
	}
	return append(buf[:0], dst...)
}

// sendRoom is a frontend message of no bytes: encoding it, as
// pgproto3.Frontend.Send does, replaces the send buffer with one holding
// the same pending bytes and room for size more, from *keep (see lend).
type sendRoom struct {
	keep *[]byte
	size int
}

func (sendRoom) Frontend() {}

func (sendRoom) Decode([]byte) error { return errors.New("store: sendRoom is never received") }

func (m sendRoom) Encode(dst []byte) ([]byte, error) { return lend(m.keep, dst, m.size), nil }

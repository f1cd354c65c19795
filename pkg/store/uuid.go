package store

import (
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
)

// uuidParam is how the statements pass a uuid, alone or in an array: as a
// pgtype.UUID, which pgx encodes (in binary, 16 bytes) in every query exec
// mode. A uuid.UUID it encodes only when a prepared statement tells it the
// parameter's type: in the exec and simple_protocol modes a pooler needs
// (PgBouncer in transaction mode) it sends it as an unknown type and fails.
// A string costs formatting here and parsing in the server, and a []string
// for a uuid[] parameter costs more: pgx tries the binary format first,
// fails, and formats the whole array into the error it then drops.
func uuidParam(id uuid.UUID) pgtype.UUID { return pgtype.UUID{Bytes: id, Valid: true} }

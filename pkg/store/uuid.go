package store

import (
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
)

// uuidParam is how the statements pass a uuid, alone or in an array: as a
// pgtype.UUID, which pgx encodes in every query exec mode, in binary (16
// bytes) where it knows the parameter's type and as text in the exec and
// simple_protocol modes a pooler needs (PgBouncer in transaction mode). A
// []uuid.UUID fails in those two modes (pgx finds no type for it). A string
// costs formatting here and parsing in the server, and a []string for a
// uuid[] parameter costs more: pgx tries the binary format first, fails,
// and formats the whole array into the error it then drops.
func uuidParam(id uuid.UUID) pgtype.UUID { return pgtype.UUID{Bytes: id, Valid: true} }

package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// heldSnapshot is when the REPEATABLE READ transaction had its snapshot.
type heldSnapshot struct {
	began, ended time.Time
	err          error
}

// holdSnapshot waits until at, then opens a REPEATABLE READ transaction,
// takes its snapshot with a read (as a report query would) and keeps it for
// d: while it is open, no dead tuple younger than the snapshot can be
// removed by vacuum anywhere in the database.
func holdSnapshot(ctx context.Context, dbURL string, at time.Time, d time.Duration) heldSnapshot {
	var h heldSnapshot
	select {
	case <-time.After(time.Until(at)):
	case <-ctx.Done():
		h.err = ctx.Err()
		return h
	}
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		h.err = fmt.Errorf("hold: connect: %w", err)
		return h
	}
	defer conn.Close(context.Background())
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		h.err = fmt.Errorf("hold: begin: %w", err)
		return h
	}
	var n int64
	if err := tx.QueryRow(ctx, `select count(*) from outbox_relay_control`).Scan(&n); err != nil {
		h.err = fmt.Errorf("hold: take the snapshot: %w", err)
		_ = tx.Rollback(context.Background())
		return h
	}
	h.began = time.Now()
	say("soak: snapshot taken (REPEATABLE READ), held for %s", d)
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
	_ = tx.Rollback(context.Background())
	h.ended = time.Now()
	say("soak: snapshot released")
	return h
}

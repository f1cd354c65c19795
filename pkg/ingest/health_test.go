package ingest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pcp/route-processing/pkg/obs"
	"github.com/pcp/route-processing/pkg/store"
)

// TestCallWatchCutsOnlyCallsSentBeforeTheLastFailedProbe: the calls begun
// before the point are cancelled once and reported cut; a later call, and a
// call registered as not to be cut, run on.
func TestCallWatchCutsOnlyCallsSentBeforeTheLastFailedProbe(t *testing.T) {
	var w callWatch
	oldCtx, oldCancel := context.WithCancel(context.Background())
	defer oldCancel()
	old := w.start(oldCancel)
	keep := w.start(nil)
	time.Sleep(2 * time.Millisecond)
	point := time.Now()
	time.Sleep(2 * time.Millisecond)
	newCtx, newCancel := context.WithCancel(context.Background())
	defer newCancel()
	fresh := w.start(newCancel)

	if n := w.cancelBefore(point); n != 1 {
		t.Fatalf("cancelBefore cut %d calls, want 1", n)
	}
	if n := w.cancelBefore(point); n != 0 {
		t.Errorf("a second cancelBefore cut %d calls again, want 0", n)
	}
	if !errors.Is(oldCtx.Err(), context.Canceled) {
		t.Errorf("the call sent before the point was not cancelled: %v", oldCtx.Err())
	}
	if newCtx.Err() != nil {
		t.Errorf("the call sent after the point was cancelled: %v", newCtx.Err())
	}
	if !w.end(old) {
		t.Error("end did not report the cancelled call as cut")
	}
	if w.end(keep) || w.end(fresh) {
		t.Error("end reported a call that was not cancelled as cut")
	}
	if d := w.oldest(); d != 0 {
		t.Errorf("oldest = %s with no call outstanding, want 0", d)
	}
}

// TestUnreachedSaysSchemaAfterAnotherError: a start usually sees
// "connection refused" before the database answers; an old schema found
// then still gets its own ERROR and /readyz reason, and a later network
// error replaces that reason with its own, in the words the relay uses.
func TestUnreachedSaysSchemaAfterAnotherError(t *testing.T) {
	var logs strings.Builder
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	ready := obs.NewReadiness(prometheus.NewRegistry(), "test")
	h := newHealth(logger, ready, "postgres", "not reached yet", obs.DBSymptom)
	ctx := context.Background()

	h.unreached(ctx, errors.New("connection refused"))
	h.unreached(ctx, fmt.Errorf("probe: %w", &store.SchemaError{Have: 0, Want: 7}))
	h.unreached(ctx, &store.SchemaError{Have: 0, Want: 7})
	if n := strings.Count(logs.String(), "schema is older than this build"); n != 1 {
		t.Fatalf("the schema ERROR logged %d times, want once after the refused connection:\n%s", n, logs.String())
	}
	if err := ready.Check(); err == nil || !strings.Contains(err.Error(), "run `ingestor migrate`") {
		t.Fatalf("readiness %v, want the schema's reason", err)
	}
	h.unreached(ctx, &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)})
	if err := ready.Check(); err == nil || !strings.Contains(err.Error(), "postgres: connection refused") {
		t.Fatalf("readiness %v after a refused connection, want its symptom", err)
	}
	h.unreached(ctx, &pgconn.PgError{Severity: "FATAL", Code: "28P01"})
	if err := ready.Check(); err == nil || !strings.Contains(err.Error(), "postgres: server error, SQLSTATE 28P01") {
		t.Fatalf("readiness %v after a refused password, want its SQLSTATE", err)
	}
}

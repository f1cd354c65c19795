package main

import (
	"context"
	"errors"
	"io"
)

// runDLQReplay is replaced by the DLQ replay tool (issue 7).
func runDLQReplay(ctx context.Context, args, environ []string, stdout, stderr io.Writer) error {
	return errors.New("dlq-replay: not implemented yet")
}

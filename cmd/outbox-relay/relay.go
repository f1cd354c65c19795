package main

import (
	"context"
	"errors"
	"io"

	"github.com/pcp/route-processing/pkg/config"
)

// runRelay is replaced by the relay wiring (issue 5).
func runRelay(ctx context.Context, environ []string, stderr io.Writer) error {
	if _, err := config.LoadRelay(environ); err != nil {
		return err
	}
	return errors.New("relay: not implemented yet")
}

// runOps is replaced by the operator subcommands (issue 5).
func runOps(ctx context.Context, cmd string, args, environ []string, stdout, stderr io.Writer) error {
	return errors.New(cmd + ": not implemented yet")
}

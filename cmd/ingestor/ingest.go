package main

import (
	"context"
	"errors"
	"io"

	"github.com/pcp/route-processing/pkg/config"
)

// runIngest is replaced by the ingest wiring (issue 4).
func runIngest(ctx context.Context, environ []string, stderr io.Writer) error {
	if _, err := config.LoadIngestor(environ); err != nil {
		return err
	}
	return errors.New("ingest: not implemented yet")
}

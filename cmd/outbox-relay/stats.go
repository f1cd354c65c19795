package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/pcp/route-processing/pkg/outbox"
	"github.com/pcp/route-processing/pkg/store"
)

// printStats writes `outbox-relay stats` for a terminal (--json writes
// store.Stats as it is).
func printStats(w io.Writer, s store.Stats) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STATUS\tROWS")
	for _, st := range []string{outbox.StatusPending, outbox.StatusPublished, outbox.StatusFailed} {
		if st == outbox.StatusPublished && !s.PublishedExact {
			fmt.Fprintf(tw, "%s\t~%d\t(estimate from table statistics; --exact counts)\n", st, s.Counts[st])
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\n", st, s.Counts[st])
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	age := "-"
	if s.Counts[outbox.StatusPending] > 0 {
		age = (time.Duration(s.OldestPendingAgeSeconds * float64(time.Second))).Round(time.Millisecond).String()
	}
	fmt.Fprintf(w, "\noldest pending: %s\n", age)
	if s.Paused {
		since := ""
		if s.PausedAt != nil {
			since = " since " + s.PausedAt.Format(time.RFC3339)
		}
		if s.PausedBy != "" {
			since += " by " + printable(s.PausedBy)
		}
		fmt.Fprintf(w, "relays: PAUSED%s (%s)\n", since, printable(orDash(s.PauseReason)))
	} else {
		fmt.Fprintln(w, "relays: running")
	}
	if len(s.Failures) > 0 {
		fmt.Fprintln(w, "\nfailures by last_error:")
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ROWS\tLAST ERROR")
		for _, f := range s.Failures {
			fmt.Fprintf(tw, "%d\t%s\n", f.Count, printable(orDash(f.LastError)))
		}
		return tw.Flush()
	}
	return nil
}

// printable escapes control characters (Go syntax, as in "\x1b[2J") in text
// that anyone with write access to the tables wrote: a pause reason or a
// broker's error message must not drive the operator's terminal.
func printable(s string) string {
	if strings.IndexFunc(s, unicode.IsControl) < 0 {
		return s
	}
	q := strconv.QuoteToGraphic(s)
	return q[1 : len(q)-1]
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

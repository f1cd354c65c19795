package config

import (
	"context"
	"log/slog"
	"slices"
	"strings"
)

// servicePrefixes begin the names of the service's own variables. Not
// KAFKA_, DATABASE_ or HTTP_: Kubernetes gives every pod variables named
// after the Services of its namespace (KAFKA_PORT for a Service "kafka").
var servicePrefixes = []string{"INGEST_", "OUTBOX_", "TOPIC_"}

// UnknownVariable is a variable set under one of the service's prefixes
// that neither binary reads: most likely a misspelling, whose value the
// operator believes in force.
type UnknownVariable struct {
	Name string
	// Like is the variable of the service it is closest to (at most two
	// letters apart), "" when none is.
	Like string
}

// UnknownVariables lists, in name order, the variables of environ that
// begin like the service's own and that no binary reads (a variable for
// the other binary is not unknown: a deployment may give both the same
// environment).
func UnknownVariables(environ []string) []UnknownVariable {
	ri, rr := newReader(environ), newReader(environ)
	_, _ = loadIngestor(ri) // errors are reported by the binary's own load
	_, _ = loadRelay(rr)
	known := make([]string, 0, len(ri.read)+len(rr.read))
	for name := range ri.read {
		known = append(known, name)
	}
	for name := range rr.read {
		known = append(known, name)
	}
	slices.Sort(known)
	var out []UnknownVariable
	for name := range ri.env {
		if ri.read[name] || rr.read[name] || !slices.ContainsFunc(servicePrefixes, func(p string) bool { return strings.HasPrefix(name, p) }) {
			continue
		}
		u := UnknownVariable{Name: name}
		best := 3
		for _, k := range known {
			if d := editDistance(name, k); d < best {
				best, u.Like = d, k
			}
		}
		out = append(out, u)
	}
	slices.SortFunc(out, func(a, b UnknownVariable) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// editDistance is the Levenshtein distance of a and b, in bytes (the
// names are ASCII).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// WarnUnknown logs a warning for each of UnknownVariables(environ): its
// name and what it is like, never its value.
func WarnUnknown(ctx context.Context, logger *slog.Logger, environ []string) {
	for _, u := range UnknownVariables(environ) {
		attrs := []any{"variable", u.Name}
		if u.Like != "" {
			attrs = append(attrs, "did_you_mean", u.Like)
		}
		logger.WarnContext(ctx, "ignoring a variable that the service does not read", attrs...)
	}
}

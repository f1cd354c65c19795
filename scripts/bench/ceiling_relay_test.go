package main

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/pcp/route-processing/pkg/e2e"
	"github.com/pcp/route-processing/pkg/passport"
	"github.com/pcp/route-processing/pkg/record"
	"github.com/pcp/route-processing/pkg/store"
	"github.com/pcp/route-processing/pkg/testenv"
)

// The relay ceiling must publish what the relay publishes: the records
// built for it equal those the relay claims after the service's write
// (topic, key, payload bytes, headers in order; the event ids aside).
func TestRelayCeilingRecordsAreTheRelays(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ev := passport.EventConfig{TopicProcessedRoute: topicOut1, TopicRouteGeoreference: topicOut2, MessageKey: passport.KeyTraceID}
	const maxAttempts = 10
	pool := testenv.Pool(t)

	in := e2e.GenValid(11, 40)
	ing := make([]passport.Accepted, len(in))
	for i := range in {
		acc, err := acceptRecord(i, in[i], ev)
		if err != nil {
			t.Fatal(err)
		}
		ing[i] = acc
	}
	ours := outputRecords(ing)
	if err := jsonbPayloads(ctx, pool, ours); err != nil {
		t.Fatal(err)
	}
	if err := store.NewPassports(pool, maxAttempts).Write(ctx, ing); err != nil {
		t.Fatal(err)
	}
	claimed, _, err := store.NewOutbox(pool).Claim(ctx, 1000, 0, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	theirs := make([]record.Record, len(claimed))
	for i := range claimed {
		theirs[i] = claimed[i].Record()
	}
	if got, want := canonical(ours), canonical(theirs); !slices.Equal(got, want) {
		t.Fatalf("%d records built, %d claimed; first difference:\n%s", len(got), len(want), firstDiff(got, want))
	}
}

// canonical renders records sortably, event ids masked.
func canonical(recs []record.Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		var hs []string
		for _, h := range r.Headers {
			v := string(h.Value)
			if h.Key == "eventId" {
				v = "*"
			}
			hs = append(hs, h.Key+"="+v)
		}
		out[i] = fmt.Sprintf("%s|%s|%s|%v", r.Topic, r.Key, r.Value, hs)
	}
	slices.Sort(out)
	return out
}

func firstDiff(a, b []string) string {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return fmt.Sprintf("built:   %.400s\nclaimed: %.400s", a[i], b[i])
		}
	}
	return "one list is longer"
}

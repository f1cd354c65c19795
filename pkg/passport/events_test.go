package passport_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pcp/route-processing/pkg/passport"
	"github.com/pcp/route-processing/pkg/record"
)

func TestAcceptYieldsTheTwoEventsOfTheContract(t *testing.T) {
	t.Parallel()
	trace, corr := "trace-1", ""
	p := &passport.Passport{RouteID: "0190a3e4-0000-7000-8000-000000000001", TraceID: &trace, CorrelationID: &corr}
	src := record.Record{Topic: "in", Headers: []record.Header{{Key: "traceparent", Value: []byte("00-a-b-01")}}}
	cfg := passport.EventConfig{TopicProcessedRoute: "proc", TopicRouteGeoreference: "geo", MessageKey: passport.KeyTraceID}

	acc := passport.Accept(p, src, cfg)
	require.Same(t, p, acc.Passport)
	require.Equal(t, src, acc.Source)
	require.Len(t, acc.Events, 2)
	for i, want := range []struct{ typ, topic string }{
		{passport.EventModeStatusChanged, "proc"},
		{passport.EventRouteGeoRef, "geo"},
	} {
		ev := acc.Events[i]
		require.Equal(t, want.typ, ev.Type)
		require.Equal(t, want.topic, ev.Topic)
		require.Equal(t, p.RouteID, ev.RouteID)
		require.Equal(t, "trace-1", ev.Key)
		require.Equal(t, p.Payload(want.typ), ev.Payload)
		require.Equal(t, []record.Header{
			{Key: "type", Value: []byte(want.typ)},
			{Key: "eventId", Value: []byte(ev.ID.String())},
			{Key: "traceId", Value: []byte("trace-1")},
			// correlationId is empty: left out.
			{Key: "traceparent", Value: []byte("00-a-b-01")},
		}, ev.Headers)
	}
	require.NotEqual(t, acc.Events[0].ID, acc.Events[1].ID)

	// No traceparent header, route-id keys.
	cfg.MessageKey = passport.KeyRouteID
	acc = passport.Accept(p, record.Record{}, cfg)
	for _, ev := range acc.Events {
		require.Equal(t, p.RouteID, ev.Key)
		_, has := (&record.Record{Headers: ev.Headers}).Header("traceparent")
		require.False(t, has)
	}
}

// The events' traceparent: the ingestor's span when it traced the record,
// the input's otherwise, none when the input had none (contract §2).
func TestAcceptTracedPicksTheEventsTraceparent(t *testing.T) {
	t.Parallel()
	p := &passport.Passport{RouteID: "0190a3e4-0000-7000-8000-000000000001"}
	in := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	span := "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01"
	withTP := record.Record{Headers: []record.Header{{Key: "traceparent", Value: []byte(in)}}}
	for _, c := range []struct {
		name string
		src  record.Record
		span string
		want string // "" : no header
	}{
		{"traced", withTP, span, span},
		{"tracing off", withTP, "", in},
		{"input had none", record.Record{}, span, ""},
	} {
		acc := passport.AcceptTraced(p, c.src, passport.EventConfig{}, c.span)
		for _, ev := range acc.Events {
			v, has := (&record.Record{Headers: ev.Headers}).Header("traceparent")
			require.Equal(t, c.want != "", has, c.name)
			require.Equal(t, c.want, string(v), c.name)
		}
	}
}

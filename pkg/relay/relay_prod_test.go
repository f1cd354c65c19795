package relay_test

// Production conditions (issue 11): hung database calls, a broker that
// stops answering, notifications that never arrive; and what operators see
// of the path (stage histograms, traces).

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/pcp/route-processing/pkg/obs"
	"github.com/pcp/route-processing/pkg/outbox"
	"github.com/pcp/route-processing/pkg/relay"
	"github.com/pcp/route-processing/pkg/relay/relaytest"
	"github.com/pcp/route-processing/pkg/store"
	"github.com/pcp/route-processing/pkg/testenv"
)

// TestRelayHungClaimGoesNotReady: a claim that hangs on a table lock
// another application holds (an operator's session) is found by the probe
// half a DBTimeout into it and cut, so /readyz turns non-200 within seconds;
// the relay moves on as soon as the lock goes.
func TestRelayHungClaimGoesNotReady(t *testing.T) {
	t.Parallel()
	b := setup(t, testenv.KafkaBootstrap(t))
	topic := testenv.Topic(t, "hung-claim", 1)
	rr := b.start(t, relay.Config{PollInterval: 100 * time.Millisecond, DBTimeout: time.Second})
	relaytest.MustInsert(t, b.pool, outbox.Event{Topic: topic})
	eventually(t, 15*time.Second, "first row published", func() bool { return relaytest.Count(t, b.pool, outbox.StatusPublished) == 1 })
	eventually(t, 5*time.Second, "/readyz 200", func() bool { return rr.readyz(t) == http.StatusOK })

	ctx := context.Background()
	tx, err := operatorConn(t, b.url).Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `lock table route_passport_outbox in access exclusive mode`)
	require.NoError(t, err)
	locked := time.Now()
	eventually(t, 5*time.Second, "/readyz not 200 while every claim hangs", func() bool { return rr.readyz(t) != http.StatusOK })
	notReady := time.Since(locked)
	require.NoError(t, tx.Rollback(ctx))
	unlocked := time.Now()

	relaytest.MustInsert(t, b.pool, outbox.Event{Topic: topic})
	eventuallyOr(t, 5*time.Second, "row published after the lock",
		func() bool { return relaytest.Count(t, b.pool, outbox.StatusPublished) == 2 },
		func() string { return rr.state(t, b.pool) })
	eventually(t, 5*time.Second, "/readyz 200 again", func() bool { return rr.readyz(t) == http.StatusOK })
	recovery := time.Since(unlocked)
	t.Logf("figures: hung claim: not ready after %.2fs (DBTimeout 1s), ready and published %.2fs after the lock ended", notReady.Seconds(), recovery.Seconds())
	require.Less(t, recovery, 2*time.Second+time.Second/2, "recovery within ~2s")
}

// TestRelayBrokerFreezeGoesNotReady: a broker that stops answering (SIGSTOP:
// connections stay open, nothing comes back, like a blackhole) while a
// batch waits for its reports turns the relay not ready within seconds,
// although PublishTimeout is long; no attempt is counted; after the thaw
// the relay is ready and publishing within about two seconds.
func TestRelayBrokerFreezeGoesNotReady(t *testing.T) {
	t.Parallel()
	broker := testenv.NewBrokerProcess(t, testenv.BrokerOptions{Partitions: 1})
	b := setup(t, broker.Addr())
	topic := testenv.CreateTopic(t, broker.Addr(), "freeze", 1)
	rr := b.start(t, relay.Config{PollInterval: 100 * time.Millisecond, PublishTimeout: 15 * time.Second,
		LockTimeout: 15*time.Second + relay.LeaseMargin})
	relaytest.MustInsert(t, b.pool, outbox.Event{Topic: topic})
	eventually(t, 20*time.Second, "warm-up row published", func() bool { return relaytest.Count(t, b.pool, outbox.StatusPublished) == 1 })

	broker.Pause(t)
	frozen := time.Now()
	for i := 0; i < 20; i++ {
		relaytest.MustInsert(t, b.pool, outbox.Event{Topic: topic})
	}
	eventually(t, 8*time.Second, "/readyz not 200 while the broker is frozen", func() bool { return rr.readyz(t) != http.StatusOK })
	notReady := time.Since(frozen)
	time.Sleep(3 * time.Second)
	require.NotEqual(t, http.StatusOK, rr.readyz(t))
	broker.Resume(t)
	thawed := time.Now()
	eventually(t, 5*time.Second, "/readyz 200 after the thaw", func() bool { return rr.readyz(t) == http.StatusOK })
	ready := time.Since(thawed)
	eventually(t, 30*time.Second, "everything published after the thaw", func() bool { return relaytest.Count(t, b.pool, outbox.StatusPublished) == 21 })
	published := time.Since(thawed)
	var maxAttempts int
	require.NoError(t, b.pool.QueryRow(context.Background(), `select max(attempts) from route_passport_outbox`).Scan(&maxAttempts))
	require.Zero(t, maxAttempts, "no attempt counted during the freeze")
	require.Zero(t, relaytest.Count(t, b.pool, outbox.StatusFailed))
	t.Logf("figures: broker freeze: not ready after %.2fs (PublishTimeout 15s), ready %.2fs and all published %.2fs after the thaw, attempts 0, failed 0",
		notReady.Seconds(), ready.Seconds(), published.Seconds())
	// The batch frozen in flight waits out its publish timeout (15s from
	// the freeze); rows claimed after the thaw go at once.
	require.Less(t, time.Since(frozen), 25*time.Second)
}

// TestRelayNoticesMissingNotifications: without a working LISTEN (as
// behind PgBouncer in transaction mode) rows are still published by the
// poll, and the relay says it is polling: gauge and one log line.
func TestRelayNoticesMissingNotifications(t *testing.T) {
	t.Parallel()
	b := setup(t, testenv.KafkaBootstrap(t))
	b.noListen = true
	topic := testenv.Topic(t, "no-notify", 1)
	rr := b.start(t, relay.Config{PollInterval: 200 * time.Millisecond, Workers: 1})
	require.Equal(t, 1.0, rr.labeled(t, "route_passport_outbox_relay_wakeup_mode", "mode", "notify"))
	for i := 1; i <= 4; i++ {
		relaytest.MustInsert(t, b.pool, outbox.Event{Topic: topic})
		eventually(t, 10*time.Second, "row published by the poll", func() bool { return relaytest.Count(t, b.pool, outbox.StatusPublished) == i })
	}
	eventually(t, 5*time.Second, "wake-up mode poll", func() bool {
		return rr.labeled(t, "route_passport_outbox_relay_wakeup_mode", "mode", "poll") == 1
	})
	require.Equal(t, 0.0, rr.labeled(t, "route_passport_outbox_relay_wakeup_mode", "mode", "notify"))

	// A notification (a LISTEN that works after all) switches back.
	rr.relay.Notified()
	require.Equal(t, 1.0, rr.labeled(t, "route_passport_outbox_relay_wakeup_mode", "mode", "notify"))
}

// TestRelayNotifyModeAndStages: with LISTEN working the relay stays in
// notify mode, and /metrics has the relay's stages of the path.
func TestRelayNotifyModeAndStages(t *testing.T) {
	t.Parallel()
	b := setup(t, testenv.KafkaBootstrap(t))
	topic := testenv.Topic(t, "notify-mode", 1)
	rr := b.start(t, relay.Config{PollInterval: 200 * time.Millisecond, Workers: 1})
	time.Sleep(300 * time.Millisecond) // the LISTEN connection is up
	for i := 1; i <= 4; i++ {
		relaytest.MustInsert(t, b.pool, outbox.Event{Topic: topic})
		eventually(t, 10*time.Second, "row published", func() bool { return relaytest.Count(t, b.pool, outbox.StatusPublished) == i })
		time.Sleep(300 * time.Millisecond)
	}
	require.Equal(t, 1.0, rr.labeled(t, "route_passport_outbox_relay_wakeup_mode", "mode", "notify"))
	for _, stage := range []string{"notify_to_claimed", "created_to_claimed", "claimed_to_reported", "claimed_to_batch_reported", "created_to_published"} {
		require.Positive(t, rr.histCount(t, obs.StageMetric, stage), stage)
	}
}

// TestRelayTraces: with a tracer, one span per claim and one per
// published row; the publish span is the child of the row's stored
// traceparent, and the published record's traceparent is the publish span.
func TestRelayTraces(t *testing.T) {
	t.Parallel()
	bootstrap := testenv.KafkaBootstrap(t)
	b := setup(t, bootstrap)
	topic := testenv.Topic(t, "traces", 1)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

	const parentTrace, parentSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	route := uuid.New()
	with := relaytest.MustInsert(t, b.pool, outbox.Event{RouteID: route.String(), Type: relaytest.RouteGeoRef, Topic: topic,
		Headers: outbox.OrderHeaders(map[string]string{"type": relaytest.RouteGeoRef, "traceparent": "00-" + parentTrace + "-" + parentSpan + "-01"})})[0]
	without := relaytest.MustInsert(t, b.pool, outbox.Event{Topic: topic})[0]
	b.start(t, relay.Config{PollInterval: 100 * time.Millisecond, Tracer: tp.Tracer("test")})

	recs := testenv.Consume(t, bootstrap, topic, 2, 30*time.Second)
	eventually(t, 10*time.Second, "publish spans ended", func() bool {
		n := 0
		for _, s := range exp.GetSpans() {
			if s.Name == "outbox publish" {
				n++
			}
		}
		return n == 2
	})
	spans := exp.GetSpans()
	var claims int
	byOutboxID := map[string]tracetest.SpanStub{}
	for _, s := range spans {
		switch s.Name {
		case "outbox claim":
			claims++
		case "outbox publish":
			byOutboxID[attr(s.Attributes, "outbox_id")] = s
		}
	}
	require.Positive(t, claims)
	ws := byOutboxID[with.ID.String()]
	require.Equal(t, parentTrace, ws.SpanContext.TraceID().String(), "same trace as the stored traceparent")
	require.Equal(t, parentSpan, ws.Parent.SpanID().String(), "child of the stored traceparent")
	require.Equal(t, trace.SpanKindProducer, ws.SpanKind)
	require.Equal(t, route.String(), attr(ws.Attributes, "route_id"))
	require.Equal(t, relaytest.RouteGeoRef, attr(ws.Attributes, "event_type"))
	require.Equal(t, topic, attr(ws.Attributes, "topic"))
	require.Len(t, ws.Links, 1, "linked to its claim")
	nos := byOutboxID[without.ID.String()]
	require.False(t, nos.Parent.IsValid(), "a row without traceparent gets a root span")

	for _, rec := range recs {
		id, _ := rec.Header("eventId")
		tpv, has := rec.Header("traceparent")
		if id != with.ID.String() {
			require.False(t, has, "no traceparent added to a row that had none")
			continue
		}
		require.Equal(t, "00-"+parentTrace+"-"+ws.SpanContext.SpanID().String()+"-01", tpv,
			"the output's traceparent is the publish span, so consumers continue the trace")
	}
}

func attr(kvs []attribute.KeyValue, key string) string {
	for _, kv := range kvs {
		if string(kv.Key) == key {
			return kv.Value.String()
		}
	}
	return ""
}

// labeled returns the value of the gauge name{label=value}.
func (rr *runningRelay) labeled(t testing.TB, name, label, value string) float64 {
	t.Helper()
	for _, m := range rr.find(t, name) {
		for _, lp := range m.GetLabel() {
			if lp.GetName() == label && lp.GetValue() == value {
				return m.GetGauge().GetValue()
			}
		}
	}
	return 0
}

// histCount returns the sample count of histogram name{stage=stage}.
func (rr *runningRelay) histCount(t testing.TB, name, stage string) uint64 {
	t.Helper()
	for _, m := range rr.find(t, name) {
		for _, lp := range m.GetLabel() {
			if lp.GetName() == "stage" && lp.GetValue() == stage {
				return m.GetHistogram().GetSampleCount()
			}
		}
	}
	return 0
}

func (rr *runningRelay) find(t testing.TB, name string) []*dto.Metric {
	t.Helper()
	mfs, err := rr.reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()
		}
	}
	return nil
}

// TestRelayIdleNoticesBrokerFreeze: a relay with nothing to publish still
// notices a frozen broker (its idle probe) and reports not ready; it is
// ready again within about a second of the thaw.
func TestRelayIdleNoticesBrokerFreeze(t *testing.T) {
	t.Parallel()
	broker := testenv.NewBrokerProcess(t, testenv.BrokerOptions{Partitions: 1})
	b := setup(t, broker.Addr())
	rr := b.start(t, relay.Config{PollInterval: 100 * time.Millisecond})
	eventually(t, 20*time.Second, "/readyz 200", func() bool { return rr.readyz(t) == http.StatusOK })
	broker.Pause(t)
	frozen := time.Now()
	eventually(t, 12*time.Second, "/readyz not 200 while the broker is frozen", func() bool { return rr.readyz(t) != http.StatusOK })
	notReady := time.Since(frozen)
	broker.Resume(t)
	thawed := time.Now()
	eventually(t, 5*time.Second, "/readyz 200 after the thaw", func() bool { return rr.readyz(t) == http.StatusOK })
	ready := time.Since(thawed)
	t.Logf("figures: idle relay, broker freeze: not ready after %.2fs, ready %.2fs after the thaw", notReady.Seconds(), ready.Seconds())
	require.Less(t, ready, 2*time.Second)
}

// operatorConn is a connection of another application than the relay's
// (application_name "operator"), closed at t's cleanup.
func operatorConn(t testing.TB, url string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg, err := pgx.ParseConfig(url)
	require.NoError(t, err)
	cfg.RuntimeParams["application_name"] = "operator"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// slowClaims makes every claim of a row (an update that sets a new lock
// token) sleep for seconds (a SQL numeric literal) before it completes.
func slowClaims(t testing.TB, url, seconds string) {
	t.Helper()
	_, err := operatorConn(t, url).Exec(context.Background(), `
create function slow_claim() returns trigger language plpgsql as $$
begin
  if new.lock_token is not null and new.lock_token is distinct from old.lock_token then
    perform pg_sleep(`+seconds+`);
  end if;
  return new;
end $$;
create trigger slow_claim before update on route_passport_outbox
for each row execute function slow_claim()`)
	require.NoError(t, err)
}

// A claim slower than DBTimeout on a database that answers (a trigger
// sleeps 10 ms for each row a claim leases; 300 rows take 3 s against a
// 2 s DBTimeout) runs on: /readyz stays 200 and every row is published.
// Cut at DBTimeout, as claims were, it failed every time, so the relay
// published nothing and reported "postgres" not ready. DBTimeout is 2 s,
// not 1 s: the watch's probe (two queries) has DBTimeout/2, and under make
// test's load 500 ms was once too little for it (123 of 136 polls non-200).
func TestRelaySlowClaimRunsOn(t *testing.T) {
	t.Parallel()
	b := setup(t, testenv.KafkaBootstrap(t))
	topic := testenv.Topic(t, "slow-claim", 1)
	rr := b.start(t, relay.Config{PollInterval: 100 * time.Millisecond, DBTimeout: 2 * time.Second, BatchSize: 300, Workers: 1})
	relaytest.MustInsert(t, b.pool, outbox.Event{Topic: topic})
	eventually(t, 15*time.Second, "first row published", func() bool { return relaytest.Count(t, b.pool, outbox.StatusPublished) == 1 })
	eventually(t, 5*time.Second, "/readyz 200", func() bool { return rr.readyz(t) == http.StatusOK })

	slowClaims(t, b.url, "0.01")
	events := make([]outbox.Event, 300)
	for i := range events {
		events[i] = outbox.Event{Topic: topic}
	}
	relaytest.MustInsert(t, b.pool, events...)
	start := time.Now()
	var polls, notReady int
	for relaytest.Count(t, b.pool, outbox.StatusPublished) < len(events)+1 {
		require.Less(t, time.Since(start), 30*time.Second, "every row published")
		polls++
		if rr.readyz(t) != http.StatusOK {
			notReady++
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("figures: slow claim (300 rows × 10 ms, DBTimeout 2s): published in %.2fs; %d of %d readiness polls non-200", time.Since(start).Seconds(), notReady, polls)
	require.Greater(t, polls, 20, "the claim was slow (a poll every 50 ms)")
	require.Zero(t, notReady, "a slow claim is not an outage")
}

// TestPausedRelayStaysReadyThroughAKafkaFreeze: a relay paused by an
// operator publishes nothing, so a frozen cluster does not make it
// unusable: /readyz stays 200 (the incident the operator paused for keeps
// its alerts quiet, README Deploy). Resumed while the cluster is still
// frozen, it reports it within seconds, and publishes after the thaw.
func TestPausedRelayStaysReadyThroughAKafkaFreeze(t *testing.T) {
	t.Parallel()
	broker := testenv.NewBrokerProcess(t, testenv.BrokerOptions{Partitions: 1})
	b := setup(t, broker.Addr())
	topic := testenv.CreateTopic(t, broker.Addr(), "paused-freeze", 1)
	rr := b.start(t, relay.Config{PollInterval: 100 * time.Millisecond})
	relaytest.MustInsert(t, b.pool, outbox.Event{Topic: topic})
	eventually(t, 20*time.Second, "warm-up row published", func() bool { return relaytest.Count(t, b.pool, outbox.StatusPublished) == 1 })

	ctx := context.Background()
	ob := store.NewOutbox(b.pool)
	require.NoError(t, ob.SetPaused(ctx, true, "kafka incident", "test"))
	eventually(t, 5*time.Second, "paused gauge", func() bool { return rr.metric(t, "route_passport_outbox_paused") == 1 })
	broker.Pause(t)
	relaytest.MustInsert(t, b.pool, outbox.Event{Topic: topic})
	for end := time.Now().Add(6 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		require.Equal(t, http.StatusOK, rr.readyz(t), "a paused relay turned not ready over a frozen cluster")
	}

	require.NoError(t, ob.SetPaused(ctx, false, "", "test"))
	eventually(t, 10*time.Second, "/readyz not 200 once resumed with the cluster still frozen", func() bool { return rr.readyz(t) != http.StatusOK })
	broker.Resume(t)
	eventually(t, 10*time.Second, "/readyz 200 after the thaw", func() bool { return rr.readyz(t) == http.StatusOK })
	eventually(t, 30*time.Second, "the row published after the thaw", func() bool { return relaytest.Count(t, b.pool, outbox.StatusPublished) == 2 })
	require.Zero(t, relaytest.Count(t, b.pool, outbox.StatusFailed))
}

// TestRelayShowsTheDatabaseWhileKafkaIsDown: with no broker the relay
// claims nothing, and /readyz still says what the database does: nothing
// about it when it answers, the missing schema when nobody migrated it
// (before, "not connected yet" in both cases, which sent operators to a
// database that was fine).
func TestRelayShowsTheDatabaseWhileKafkaIsDown(t *testing.T) {
	t.Parallel()
	dead, err := testenv.FreeAddr()
	require.NoError(t, err)

	b := setup(t, dead)
	rr := b.start(t, relay.Config{PollInterval: 100 * time.Millisecond})
	eventually(t, 10*time.Second, "/readyz names Kafka and not PostgreSQL", func() bool {
		code, body := rr.readyzBody(t)
		return code != http.StatusOK && strings.Contains(body, "kafka") && !strings.Contains(body, "postgres")
	})

	empty := setup(t, dead)
	empty.url = testenv.EmptyDatabaseURL(t)
	pool, err := store.Open(context.Background(), empty.url, "test")
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	empty.pool, empty.outbox, empty.noListen = pool, store.NewOutbox(pool), true
	unmigrated := empty.start(t, relay.Config{PollInterval: 100 * time.Millisecond})
	eventuallyOr(t, 10*time.Second, "/readyz says the schema is missing", func() bool {
		_, body := unmigrated.readyzBody(t)
		return strings.Contains(body, "run `ingestor migrate`")
	}, func() string { _, body := unmigrated.readyzBody(t); return body })
}

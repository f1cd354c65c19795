package relay_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pcp/route-processing/pkg/outbox"
	"github.com/pcp/route-processing/pkg/relay"
	"github.com/pcp/route-processing/pkg/relay/relaytest"
	"github.com/pcp/route-processing/pkg/store"
	"github.com/pcp/route-processing/pkg/testenv"
)

// TestRelayBehindPgBouncer: with the pool through PgBouncer in transaction
// mode (default_query_exec_mode=exec), every row is marked PUBLISHED. With
// LISTEN through the pooler too, no notification arrives and the relay
// says it polls, from its listener probe before any row is written; with
// the LISTEN on a direct connection (DATABASE_LISTEN_URL) it stays in
// notify mode.
func TestRelayBehindPgBouncer(t *testing.T) {
	t.Parallel()
	cluster := testenv.NewPostgresCluster(t, testenv.PostgresOptions{})
	bouncer := testenv.NewPgBouncer(t, cluster, testenv.PgBouncerOptions{})
	bootstrap := testenv.KafkaBootstrap(t)
	for _, direct := range []bool{false, true} {
		t.Run(fmt.Sprintf("direct_listen=%v", direct), func(t *testing.T) {
			name := fmt.Sprintf("relay_bouncer_%v", direct)
			directURL := cluster.CreateDatabase(t, name, true)
			ctx := context.Background()
			pool, err := store.Open(ctx, bouncer.URL(name), "test")
			require.NoError(t, err)
			t.Cleanup(pool.Close)
			listenURL := bouncer.URL(name)
			if direct {
				listenURL = directURL
			}
			b := &testBundle{url: listenURL, pool: pool, outbox: store.NewOutbox(pool), bootstrap: bootstrap}
			topic := testenv.Topic(t, "bouncer", 1)
			rr := b.start(t, relay.Config{PollInterval: 300 * time.Millisecond, Workers: 1})
			want := "poll"
			if direct {
				want = "notify"
			}
			// The listener's probe alone decides, before any row: it is
			// answered within probeWait (3 s) or not at all.
			time.Sleep(4 * time.Second)
			require.Equal(t, 1.0, rr.labeled(t, "route_passport_outbox_relay_wakeup_mode", "mode", want),
				"wake-up mode after the listener probe, before any row")
			for i := 1; i <= 5; i++ {
				relaytest.MustInsert(t, pool, outbox.Event{Topic: topic})
				eventually(t, 10*time.Second, "row PUBLISHED", func() bool { return relaytest.Count(t, pool, outbox.StatusPublished) == i })
				time.Sleep(100 * time.Millisecond)
			}
			eventually(t, 3*time.Second, "wake-up mode "+want, func() bool {
				return rr.labeled(t, "route_passport_outbox_relay_wakeup_mode", "mode", want) == 1
			})
			require.Len(t, testenv.Consume(t, bootstrap, topic, 5, 30*time.Second), 5)
			require.Equal(t, http.StatusOK, rr.readyz(t))
		})
	}
}

// TestRelayPostgresBlackhole: the PostgreSQL link holds every byte (a
// Toxiproxy timeout toxic: no RST) with the relay's default DBTimeout;
// /readyz turns non-200 within seconds, nothing is FAILED or charged, and
// after the link heals every row is published.
func TestRelayPostgresBlackhole(t *testing.T) {
	t.Parallel()
	cluster := testenv.NewPostgresCluster(t, testenv.PostgresOptions{})
	directURL := cluster.CreateDatabase(t, "relay_blackhole", true)
	proxy := testenv.NewFaultProxy(t, "pg", cluster.Addr())
	proxied := cluster.URLAt(proxy.Addr(), "relay_blackhole")
	ctx := context.Background()
	direct, err := store.Open(ctx, directURL, "test")
	require.NoError(t, err)
	t.Cleanup(direct.Close)
	pool, err := store.Open(ctx, proxied, "test")
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	bootstrap := testenv.KafkaBootstrap(t)
	topic := testenv.Topic(t, "pg-blackhole", 1)
	b := &testBundle{url: proxied, pool: pool, outbox: store.NewOutbox(pool), bootstrap: bootstrap}
	rr := b.start(t, relay.Config{PollInterval: 200 * time.Millisecond})
	relaytest.MustInsert(t, direct, outbox.Event{Topic: topic})
	eventually(t, 15*time.Second, "first row published", func() bool { return relaytest.Count(t, direct, outbox.StatusPublished) == 1 })
	eventually(t, 5*time.Second, "/readyz 200", func() bool { return rr.readyz(t) == http.StatusOK })

	proxy.Blackhole(t)
	start := time.Now()
	for i := 0; i < 10; i++ {
		relaytest.MustInsert(t, direct, outbox.Event{Topic: topic})
	}
	eventually(t, relay.DefaultDBTimeout+5*time.Second, "/readyz not 200 during the blackhole", func() bool { return rr.readyz(t) != http.StatusOK })
	notReady := time.Since(start)
	time.Sleep(10*time.Second - time.Since(start))
	proxy.Heal(t, "blackhole")
	healed := time.Now()
	eventually(t, 20*time.Second, "every row published after the blackhole", func() bool { return relaytest.Count(t, direct, outbox.StatusPublished) == 11 })
	flowing := time.Since(healed)
	eventually(t, 10*time.Second, "/readyz 200 again", func() bool { return rr.readyz(t) == http.StatusOK })
	var maxAttempts int
	require.NoError(t, direct.QueryRow(ctx, `select max(attempts) from route_passport_outbox`).Scan(&maxAttempts))
	require.Zero(t, maxAttempts)
	require.Zero(t, relaytest.Count(t, direct, outbox.StatusFailed))
	t.Logf("figures: pg blackhole 10s (DBTimeout %s): not ready after %.2fs, all published %.2fs after the heal, attempts 0, failed 0",
		relay.DefaultDBTimeout, notReady.Seconds(), flowing.Seconds())
}

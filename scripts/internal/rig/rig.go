// Package rig is what scripts/bench and scripts/soak both stand up before
// they measure: the service's binaries built, a local PostgreSQL cluster, the
// dev broker, and an admin client of each.
package rig

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pcp/route-processing/pkg/e2e"
	"github.com/pcp/route-processing/pkg/testenv"
)

// Rig is the built binaries, the cluster and the broker of one run; t's
// cleanups stop them.
type Rig struct {
	Bins      e2e.Binaries
	PG        *testenv.PostgresCluster
	Admin     *pgxpool.Pool // on the cluster's postgres database
	Broker    *testenv.BrokerProcess
	Bootstrap string
	Adm       *kadm.Client
}

// Start builds the binaries, starts PostgreSQL with pg and the dev broker
// (3 partitions by default); name prefixes the failure messages.
func Start(t testing.TB, name string, pg testenv.PostgresOptions) *Rig {
	r := &Rig{}
	if dir := os.Getenv("RIG_BINARIES"); dir != "" {
		// Prebuilt binaries, e.g. of an older commit, to measure a
		// regression with this tree's harness.
		r.Bins = e2e.Binaries{Ingestor: filepath.Join(dir, "ingestor"), Relay: filepath.Join(dir, "outbox-relay")}
		t.Logf("%s: RIG_BINARIES: measuring the binaries in %s", name, dir)
	} else {
		r.Bins = e2e.BuildBinaries(t, t.TempDir())
	}
	r.PG = testenv.NewPostgresCluster(t, pg)
	admin, err := pgxpool.New(context.Background(), r.PG.URL("postgres"))
	if err != nil {
		t.Fatalf("%s: admin pool: %v", name, err)
	}
	t.Cleanup(admin.Close)
	r.Admin = admin
	r.Broker = testenv.NewBrokerProcess(t, testenv.BrokerOptions{Partitions: 3})
	r.Bootstrap = r.Broker.Addr()
	cl, err := kgo.NewClient(kgo.SeedBrokers(r.Bootstrap))
	if err != nil {
		t.Fatalf("%s: kafka client: %v", name, err)
	}
	t.Cleanup(cl.Close)
	r.Adm = kadm.NewClient(cl)
	return r
}

// CreateTopic creates the topic (an existing one is fine), retrying for up
// to 30 s while the broker settles, and returns its name.
func CreateTopic(t testing.TB, adm *kadm.Client, name string, partitions int32) string {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		resp, err := adm.CreateTopic(ctx, partitions, -1, nil, name)
		if err == nil {
			err = resp.Err
		}
		if err == nil || strings.Contains(err.Error(), "TOPIC_ALREADY_EXISTS") {
			return name
		}
		if ctx.Err() != nil {
			t.Fatalf("create topic %s: %v", name, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

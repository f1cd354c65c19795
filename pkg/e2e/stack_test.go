package e2e

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pcp/route-processing/pkg/contractschema"
	"github.com/pcp/route-processing/pkg/passportgen"
	"github.com/pcp/route-processing/pkg/testenv"
)

// topics are the four topics of the contract, named per test.
type topics struct {
	Input, DLQ, Processed, GeoRef string
}

// serviceEnv is what both binaries need to reach dbURL and bootstrap with
// these topics.
func (tp topics) serviceEnv(dbURL, bootstrap string) []string {
	return []string{
		"DATABASE_URL=" + dbURL,
		"KAFKA_BOOTSTRAP_SERVERS=" + bootstrap,
		"TOPIC_INPUT=" + tp.Input,
		"TOPIC_INPUT_DLQ=" + tp.DLQ,
		"TOPIC_PROCESSED_ROUTE=" + tp.Processed,
		"TOPIC_ROUTE_GEOREFERENCE=" + tp.GeoRef,
		"LOG_LEVEL=info",
	}
}

// stackOptions shape one test's environment.
type stackOptions struct {
	// Partitions of the input topic (default 3).
	Partitions int
	// InputMaxMessageBytes raises the input topic's max.message.bytes so
	// that values over the contract's 1 MiB limit can be produced at all.
	InputMaxMessageBytes int
	// StaticMember gives the ingestor a group.instance.id (and a 6 s
	// session) through KAFKA_CONSUMER_PROPERTY_*, as an operator would for a
	// crash-looping pod: a restarted ingestor takes its predecessor's place
	// in the group at once instead of waiting for the killed member's
	// session to expire (10 s by default, longer than the 1–3 s
	// between kills).
	StaticMember bool
	// IngestorEnv and RelayEnv are added to the defaults (later wins).
	IngestorEnv, RelayEnv []string
}

// stack is one test's private world: a PostgreSQL cluster, a broker process,
// topics, a consumer group and the two Binaries (not started).
type stack struct {
	t         *testing.T
	pg        *testenv.PostgresCluster
	dbURL     string
	pool      *pgxpool.Pool
	broker    *testenv.BrokerProcess
	bootstrap string
	adm       *kadm.Client
	topics    topics
	group     string
	ingestor  *Proc
	relay     *Proc
}

// newStack builds the stack; the database is migrated by `ingestor migrate`,
// as in production.
func newStack(t *testing.T, bins Binaries, name string, opts stackOptions) *stack {
	t.Helper()
	s := &stack{t: t}
	s.pg = testenv.NewPostgresCluster(t, testenv.PostgresOptions{})
	s.dbURL = s.pg.CreateDatabase(t, "pcp_route_processing", false)
	s.broker = testenv.NewBrokerProcess(t, testenv.BrokerOptions{Partitions: 3})
	s.bootstrap = s.broker.Addr()

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if out, err := RunOnce(ctx, bins.Ingestor, []string{"DATABASE_URL=" + s.dbURL, "LOG_FORMAT=json"}, "migrate"); err != nil {
		t.Fatalf("e2e: ingestor migrate: %v\n%s", err, out)
	}

	parts := opts.Partitions
	if parts == 0 {
		parts = 3
	}
	s.topics = topics{
		Input: createTopic(t, s.bootstrap, name+".input", parts, opts.InputMaxMessageBytes),
		// The DLQ keeps the original value, so it must take what the input
		// takes (an oversized record that cannot be dead-lettered blocks its
		// partition: the offset is committed only after the DLQ write).
		DLQ:       createTopic(t, s.bootstrap, name+".dlq", 3, opts.InputMaxMessageBytes),
		Processed: createTopic(t, s.bootstrap, name+".route-in", 3, 0),
		GeoRef:    createTopic(t, s.bootstrap, name+".georef", 3, 0),
	}
	s.group = name + "-group"

	cl, err := kgo.NewClient(kgo.SeedBrokers(s.bootstrap))
	if err != nil {
		t.Fatalf("e2e: kafka client: %v", err)
	}
	t.Cleanup(cl.Close)
	s.adm = kadm.NewClient(cl)

	pool, err := pgxpool.New(ctx, s.dbURL)
	if err != nil {
		t.Fatalf("e2e: pool: %v", err)
	}
	t.Cleanup(pool.Close)
	s.pool = pool

	common := s.topics.serviceEnv(s.dbURL, s.bootstrap)
	ingEnv := append(append([]string{}, common...),
		"KAFKA_CONSUMER_GROUP="+s.group,
		// Come back quickly after a database outage.
		"INGEST_MAX_BACKOFF=1s",
	)
	if opts.StaticMember {
		ingEnv = append(ingEnv,
			"KAFKA_CONSUMER_PROPERTY_GROUP_INSTANCE_ID="+name+"-ingestor",
			"KAFKA_CONSUMER_PROPERTY_SESSION_TIMEOUT_MS=6000")
	}
	relayEnv := append(append([]string{}, common...),
		// Short leases and backoffs so that a killed relay's rows and a
		// failed publish come back within seconds; attempts stay at the
		// default (10), so a relay that burned attempts during an outage
		// would still be caught by the FAILED checks.
		"OUTBOX_LOCK_TIMEOUT=10s",
		"OUTBOX_INITIAL_BACKOFF=200ms",
		"OUTBOX_MAX_BACKOFF=2s",
		"OUTBOX_PROBE_MAX_BACKOFF=1s",
		"OUTBOX_POLL_INTERVAL=250ms",
	)
	s.ingestor = NewProc(t, "ingestor", bins.Ingestor, append(ingEnv, opts.IngestorEnv...))
	s.relay = NewProc(t, "outbox-relay", bins.Relay, append(relayEnv, opts.RelayEnv...))
	return s
}

// createTopic creates a topic with a unique name on the broker.
func createTopic(t testing.TB, bootstrap, prefix string, partitions, maxMessageBytes int) string {
	t.Helper()
	if maxMessageBytes == 0 {
		return testenv.CreateTopic(t, bootstrap, prefix, partitions)
	}
	name := fmt.Sprintf("%s-%08x", prefix, rand.Uint32())
	cl, err := kgo.NewClient(kgo.SeedBrokers(bootstrap))
	if err != nil {
		t.Fatalf("e2e: kafka client: %v", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	v := fmt.Sprint(maxMessageBytes)
	resp, err := adm.CreateTopic(ctx, int32(partitions), -1, map[string]*string{"max.message.bytes": &v}, name)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("e2e: create topic %s: %v", name, err)
	}
	return name
}

// startBoth starts the ingestor and the relay and waits until both are ready.
func (s *stack) startBoth() {
	s.t.Helper()
	s.ingestor.Start()
	s.relay.Start()
	s.ingestor.WaitReady(90 * time.Second)
	s.relay.WaitReady(90 * time.Second)
}

// dbState is what the database holds after a run.
type dbState struct {
	Routes   map[string]bool // route_id
	Outbox   map[string]outboxRow
	ByStatus map[string]int
}

type outboxRow struct {
	RouteID, EventType, Topic, Status string
	Attempts                          int
}

func (s *stack) readDB(ctx context.Context) (dbState, error) {
	st := dbState{Routes: map[string]bool{}, Outbox: map[string]outboxRow{}, ByStatus: map[string]int{}}
	rows, err := s.pool.Query(ctx, `select route_id::text from route_passports`)
	if err != nil {
		return st, err
	}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return st, err
		}
		st.Routes[id] = true
	}
	if err := rows.Err(); err != nil {
		return st, err
	}
	rows, err = s.pool.Query(ctx, `select id::text, route_id::text, event_type, topic, status, attempts from route_passport_outbox`)
	if err != nil {
		return st, err
	}
	for rows.Next() {
		var id string
		var r outboxRow
		if err := rows.Scan(&id, &r.RouteID, &r.EventType, &r.Topic, &r.Status, &r.Attempts); err != nil {
			return st, err
		}
		st.Outbox[id] = r
		st.ByStatus[r.Status]++
	}
	return st, rows.Err()
}

// outboxCounts returns rows per status (cheap enough to poll).
func (s *stack) outboxCounts(ctx context.Context) (map[string]int, error) {
	rows, err := s.pool.Query(ctx, `select status, count(*) from route_passport_outbox group by status`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var st string
		var n int
		if err := rows.Scan(&st, &n); err != nil {
			return nil, err
		}
		out[st] = n
	}
	return out, rows.Err()
}

// waitFor polls cond every interval until it holds or timeout passes; it
// returns cond's last description and whether it held.
func waitFor(timeout, interval time.Duration, cond func() (bool, string)) (bool, string) {
	deadline := time.Now().Add(timeout)
	for {
		ok, desc := cond()
		if ok || time.Now().After(deadline) {
			return ok, desc
		}
		time.Sleep(interval)
	}
}

// waitPublished waits until the outbox holds want rows, all PUBLISHED.
func (s *stack) waitPublished(want int, timeout time.Duration) (bool, string) {
	return waitFor(timeout, 500*time.Millisecond, func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := s.outboxCounts(ctx)
		if err != nil {
			return false, err.Error()
		}
		return c["PUBLISHED"] == want && len(c) == 1, fmt.Sprintf("outbox %v, want %d PUBLISHED", c, want)
	})
}

// waitCommittedToEnd waits until the group's committed offsets reach the end
// of every partition of the input topic.
func (s *stack) waitCommittedToEnd(timeout time.Duration) (bool, string) {
	return waitFor(timeout, 500*time.Millisecond, func() (bool, string) {
		ends := s.endOffsets(s.topics.Input)
		committed := s.committedOffsets()
		for p, end := range ends {
			if end > 0 && committed[p] != end {
				return false, fmt.Sprintf("committed %v, end %v", committed, ends)
			}
		}
		return true, fmt.Sprintf("committed %v, end %v", committed, ends)
	})
}

// committedOffsets is testenv.CommittedOffsets on the stack's own client (a
// poll loop must not open a client per call), tolerant of errors: a group
// that has not committed yet, or a broker that is slow to answer, reads as
// nothing committed.
func (s *stack) committedOffsets() map[int32]int64 {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out := map[int32]int64{}
	resps, err := s.adm.FetchOffsets(ctx, s.group)
	if err != nil {
		return out
	}
	for p, o := range resps[s.topics.Input] {
		if o.Err == nil && o.At >= 0 {
			out[p] = o.At
		}
	}
	return out
}

func (s *stack) endOffsets(topic string) map[int32]int64 {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ends, err := s.adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		s.t.Fatalf("e2e: end offsets of %s: %v", topic, err)
	}
	out := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
	return out
}

// outputs is what the two output topics hold, grouped by the eventId header.
type outputs struct {
	Records    int
	ByEventID  map[string]int    // eventId -> times seen
	TopicOf    map[string]string // eventId -> topic it was seen on
	BadHeaders int               // records without eventId or type
}

func (s *stack) readOutputs() outputs {
	s.t.Helper()
	o := outputs{ByEventID: map[string]int{}, TopicOf: map[string]string{}}
	schemas, err := contractschema.New()
	if err != nil {
		s.t.Fatalf("e2e: load the event schemas: %v", err)
	}
	for _, topic := range []string{s.topics.Processed, s.topics.GeoRef} {
		for i, r := range testenv.ReadAll(s.t, s.bootstrap, topic) {
			o.Records++
			// The published events must match docs/schemas; every record of
			// the first schemaSample per topic is checked (all of them would
			// cost seconds per scenario under -race).
			if i < schemaSample {
				if err := contractschema.ValidateOutput(schemas, r.Key, r.Value, r.Headers); err != nil {
					s.t.Errorf("e2e: output record %s/%d@%d breaks its schema: %v", topic, r.Partition, r.Offset, err)
				}
			}
			id, ok := r.Header("eventId")
			if _, typed := r.Header("type"); !ok || !typed {
				o.BadHeaders++
				continue
			}
			o.ByEventID[id]++
			o.TopicOf[id] = topic
		}
	}
	return o
}

// schemaSample is how many output records per topic readOutputs validates
// against their JSON Schema.
const schemaSample = 200

// verdict is the common tally of a resilience run.
type verdict struct {
	Produced   int
	Lost       int // passports without a row + events never seen on their topic
	Duplicates int // output records beyond the first per eventId
	DLQ        int
	Failed     int
	Published  int // outbox rows PUBLISHED
	Details    []string
}

// tally compares what was produced with the database and the output topics.
func (s *stack) tally(recs []passportgen.Record) verdict {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	v := verdict{Produced: len(recs)}
	st, err := s.readDB(ctx)
	if err != nil {
		s.t.Fatalf("e2e: read database: %v", err)
	}
	v.Failed = st.ByStatus["FAILED"]
	v.Published = st.ByStatus["PUBLISHED"]
	out := s.readOutputs()
	v.DLQ = len(testenv.ReadAll(s.t, s.bootstrap, s.topics.DLQ))

	events := map[string][]string{} // routeId -> event types in the outbox
	for id, r := range st.Outbox {
		events[r.RouteID] = append(events[r.RouteID], r.EventType)
		wantTopic := map[string]string{
			"ModeStatusChangedEvent": s.topics.Processed,
			"RouteGeoRefEvent":       s.topics.GeoRef,
		}[r.EventType]
		if out.ByEventID[id] == 0 {
			v.Lost++
			v.note("event %s (%s of route %s, %s) never seen on %s", id, r.EventType, r.RouteID, r.Status, wantTopic)
		} else if out.TopicOf[id] != wantTopic {
			v.Lost++
			v.note("event %s (%s) seen on %s, want %s", id, r.EventType, out.TopicOf[id], wantTopic)
		}
	}
	for _, r := range recs {
		if !st.Routes[r.RouteID] {
			v.Lost++
			v.note("passport %s (route %s) has no row", r.ID, r.RouteID)
			continue
		}
		if n := len(events[r.RouteID]); n != 2 {
			v.Lost += 2 - min(n, 2)
			v.note("route %s has %d outbox rows, want 2", r.RouteID, n)
		}
	}
	seen := 0
	for id, n := range out.ByEventID {
		seen++
		v.Duplicates += n - 1
		if _, ok := st.Outbox[id]; !ok {
			v.note("eventId %s on an output topic has no outbox row", id)
		}
	}
	if out.BadHeaders > 0 {
		v.note("%d output records lack the eventId or type header", out.BadHeaders)
	}
	return v
}

func (v *verdict) note(format string, args ...any) {
	if len(v.Details) < 20 {
		v.Details = append(v.Details, fmt.Sprintf(format, args...))
	}
}

func (v verdict) String() string {
	return fmt.Sprintf("produced=%d lost=%d duplicates=%d dlq=%d failed=%d published=%d",
		v.Produced, v.Lost, v.Duplicates, v.DLQ, v.Failed, v.Published)
}

// report prints one line of figures to the test log and to stdout (so that
// `go test` without -v shows it too).
func report(t testing.TB, name string, fields ...string) {
	line := name + ": " + strings.Join(fields, " ")
	t.Log(line)
	fmt.Printf("%s\n", line)
}

// dlqOrigins returns the (partition, offset) of every DLQ record's original
// and the count per pcp-error-category.
func (s *stack) dlqOrigins() (map[[2]int64]int, map[string]int) {
	s.t.Helper()
	orig := map[[2]int64]int{}
	cats := map[string]int{}
	for _, r := range testenv.ReadAll(s.t, s.bootstrap, s.topics.DLQ) {
		var p, o int64 = -1, -1
		for _, h := range r.Headers {
			switch h.Key {
			case "kafka_dlt-original-partition":
				if len(h.Value) == 4 {
					p = int64(int32(binary.BigEndian.Uint32(h.Value)))
				}
			case "kafka_dlt-original-offset":
				if len(h.Value) == 8 {
					o = int64(binary.BigEndian.Uint64(h.Value))
				}
			case "pcp-error-category":
				cats[string(h.Value)]++
			}
		}
		orig[[2]int64{p, o}]++
	}
	return orig, cats
}

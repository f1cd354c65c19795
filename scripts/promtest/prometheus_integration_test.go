package promtest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pcp/route-processing/pkg/passportgen"
	"github.com/pcp/route-processing/pkg/testenv"
)

// outageAlerts are the alerts a PostgreSQL outage must raise: both binaries
// report not ready while the database is gone.
var outageAlerts = []string{"PcpIngestorNotReady", "PcpOutboxRelayNotReady"}

// absenceAlerts fire when no pod of a component is scraped at all (each
// alert names the Service it watches). While both binaries are scraped their
// expressions must be empty: a job or namespace that does not match what the
// ServiceMonitor's targets get would make them fire for ever.
var absenceAlerts = map[string]string{"PcpIngestorAbsent": ingestorJob, "PcpOutboxRelayAbsent": relayJob}

// staleGaugesAlert watches the relay's pending-gauge refresh; thresholdRE
// cuts its comparison off, leaving the age it compares.
const staleGaugesAlert = "PcpOutboxPendingGaugesStale"

var thresholdRE = regexp.MustCompile(`\s*>\s*[0-9.]+\s*$`)

// TestPrometheusSeesTheService runs both binaries under a real Prometheus
// that scrapes them as the chart's ServiceMonitor would and evaluates the
// chart's rules: every rule loads and evaluates without error, the
// database-outage alerts' expressions are false while healthy and true while
// PostgreSQL is stopped (and the alerts fire, with `for` shortened to 2s),
// false again after it is back, the relay's KEDA query is 0 while the relays
// are paused with a backlog and the backlog otherwise, and every query of the
// shipped dashboard returns at least one series with a number during the run.
func TestPrometheusSeesTheService(t *testing.T) {
	mon := monitoringFiles(t)
	var sc scrapeSettings
	raw, err := os.ReadFile(filepath.Join(mon, "scrape.json"))
	if err != nil {
		t.Fatalf("promtest: %v", err)
	}
	if err := json.Unmarshal(raw, &sc); err != nil {
		t.Fatalf("promtest: scrape.json: %v", err)
	}
	if sc.Path == "" || sc.Namespace == "" {
		t.Fatalf("promtest: scrape.json lacks path or namespace: %s", raw)
	}

	ingestorBin, relayBin := buildBinaries(t)
	pg := testenv.NewPostgresCluster(t, testenv.PostgresOptions{})
	dbURL := pg.CreateDatabase(t, "pcp_route_processing", false)
	runOnce(t, ingestorBin, []string{"DATABASE_URL=" + dbURL, "LOG_FORMAT=json"}, "migrate")

	bootstrap := testenv.KafkaBootstrap(t)
	input := testenv.CreateTopic(t, bootstrap, "promtest.input", 3)
	common := []string{
		"DATABASE_URL=" + dbURL,
		"KAFKA_BOOTSTRAP_SERVERS=" + bootstrap,
		"TOPIC_INPUT=" + input,
		"TOPIC_INPUT_DLQ=" + testenv.CreateTopic(t, bootstrap, "promtest.dlq", 3),
		"TOPIC_PROCESSED_ROUTE=" + testenv.CreateTopic(t, bootstrap, "promtest.route-in", 3),
		"TOPIC_ROUTE_GEOREFERENCE=" + testenv.CreateTopic(t, bootstrap, "promtest.georef", 3),
	}
	ingestorAddr := startProc(t, ingestorBin, append(common,
		"KAFKA_CONSUMER_GROUP=promtest-group",
		"INGEST_MAX_BACKOFF=1s")) // back quickly after the outage
	relayAddr := startProc(t, relayBin, append(common,
		"OUTBOX_POLL_INTERVAL=250ms",
		"OUTBOX_INITIAL_BACKOFF=200ms",
		"OUTBOX_MAX_BACKOFF=2s",
		"OUTBOX_PROBE_MAX_BACKOFF=1s"))

	prom := startPrometheus(t, mon, sc, []target{
		{job: ingestorJob, pod: "ingestor-0", addr: ingestorAddr},
		{job: relayJob, pod: "outbox-relay-0", addr: relayAddr},
	})
	start := time.Now()

	// Every rule of the chart loaded; their expressions come from the server.
	exprs := map[string]string{}
	eventually(t, 30*time.Second, "rules loaded", func() string {
		rules, err := prom.alertRules()
		if err != nil {
			return err.Error()
		}
		for _, r := range rules {
			exprs[r.Name] = r.Query
		}
		for _, a := range outageAlerts {
			if exprs[a] == "" {
				return "no rule " + a
			}
		}
		for a := range absenceAlerts {
			if exprs[a] == "" {
				return "no rule " + a
			}
		}
		return ""
	})
	t.Logf("promtest: %d alerting rules loaded", len(exprs))

	eventually(t, 60*time.Second, "both targets up and both binaries ready", func() string {
		res, err := prom.query(`up{namespace="` + sc.Namespace + `"} == 1`)
		if err != nil || len(res) != 2 {
			return "up: " + describe(res, err)
		}
		for _, a := range outageAlerts {
			if res, err := prom.query(exprs[a]); err != nil || len(res) != 0 {
				return a + " expression while healthy: " + describe(res, err)
			}
		}
		// Absent while both are scraped, not absent because it names no
		// target: the same expression for a Service nobody scrapes is true.
		for a, job := range absenceAlerts {
			if res, err := prom.query(exprs[a]); err != nil || len(res) != 0 {
				return a + " expression while both targets are up: " + describe(res, err)
			}
			gone := strings.ReplaceAll(exprs[a], `"`+job+`"`, `"`+job+`-gone"`)
			if gone == exprs[a] {
				return a + " does not select job " + job + ": " + exprs[a]
			}
			if res, err := prom.query(gone); err != nil || len(res) != 1 || number(res[0]) != 1 {
				return a + " expression for an unscraped Service (" + gone + "): " + describe(res, err)
			}
		}
		// The stale-gauge alert is false because the relay refreshes, not
		// because its selector matches nothing: without its threshold the
		// same expression must find the relay's pod.
		stale := exprs[staleGaugesAlert]
		if stale == "" {
			return "no rule " + staleGaugesAlert
		}
		if res, err := prom.query(stale); err != nil || len(res) != 0 {
			return staleGaugesAlert + " expression while healthy: " + describe(res, err)
		}
		age := thresholdRE.ReplaceAllString(stale, "")
		if age == stale {
			return staleGaugesAlert + " expression has no trailing threshold: " + stale
		}
		if res, err := prom.query(age); err != nil || len(res) != 1 || number(res[0]) > 30 {
			return "seconds since the relay refreshed its pending gauges (" + age + "): " + describe(res, err)
		}
		res, err = prom.query(`min(route_passport_ingest_ready) + min(route_passport_outbox_relay_ready)`)
		if err != nil || len(res) != 1 || res[0].Value[1] != "2" {
			return "readiness gauges: " + describe(res, err)
		}
		return ""
	})

	rng := passportgen.NewRand(14)
	send := func() {
		var recs []testenv.Record
		for range 10 {
			p := passportgen.Valid(rng)
			recs = append(recs, testenv.Record{Key: p.Key, Value: p.Value})
		}
		recs = append(recs, invalidExamples(t)...)
		testenv.Produce(t, bootstrap, input, recs...)
	}
	var published float64
	for i := 1; i <= 3; i++ {
		send()
		want := float64(i * 20) // 10 valid passports -> 20 events
		eventually(t, 60*time.Second, "events published", func() string {
			res, err := prom.query(`sum(route_passport_outbox_published_total)`)
			if err != nil || len(res) != 1 {
				return describe(res, err)
			}
			published = number(res[0])
			if published < want {
				return "published " + res[0].Value[1].(string)
			}
			return ""
		})
		time.Sleep(2 * time.Second) // a few scrapes between rounds: rates and quantiles over several windows
	}

	// The relay's KEDA query follows the backlog, except while the relays are
	// paused: then it is 0 (more paused pods would publish nothing).
	scaler := relayScalerQuery(t, mon)
	unpaused := pausedRE.ReplaceAllString(scaler, "(${0} * 0)") // the same query, had the relays not been paused
	if unpaused == scaler {
		t.Fatalf("promtest: the relay's KEDA query does not read route_passport_outbox_paused (update this test if that is meant): %s", scaler)
	}
	runOnce(t, relayBin, common, "pause", "--reason", "promtest")
	send()
	eventually(t, 30*time.Second, "relay KEDA query 0 while paused, with a backlog", func() string {
		res, err := prom.query(`((` + scaler + `) == bool 0) * ((` + unpaused + `) > bool 0)`)
		if err != nil || len(res) != 1 || number(res[0]) != 1 {
			q, qerr := prom.query(scaler)
			u, uerr := prom.query(unpaused)
			return "paused: " + describe(res, err) + "; query " + describe(q, qerr) + "; unpaused " + describe(u, uerr)
		}
		return ""
	})
	runOnce(t, relayBin, common, "resume")
	eventually(t, 30*time.Second, "relay KEDA query = the backlog after resume", func() string {
		res, err := prom.query(`(max(route_passport_outbox_paused{job="` + relayJob + `"}) == bool 0) * ((` + scaler + `) == bool (` + unpaused + `))`)
		if err != nil || len(res) != 1 || number(res[0]) != 1 {
			return describe(res, err)
		}
		return ""
	})

	// The outage.
	outage := time.Now()
	pg.Stop(t)
	send() // Kafka is up: input keeps arriving
	eventually(t, 90*time.Second, "outage alerts' expressions true", func() string {
		for _, a := range outageAlerts {
			if res, err := prom.query(exprs[a]); err != nil || len(res) == 0 {
				return a + ": " + describe(res, err)
			}
		}
		return ""
	})
	t.Logf("promtest: outage expressions true %s after PostgreSQL stopped", time.Since(outage).Round(time.Second))
	eventually(t, 30*time.Second, "outage alerts firing", func() string {
		states, err := prom.alertStates()
		if err != nil {
			return err.Error()
		}
		for _, a := range outageAlerts {
			if !slices.Contains(states[a], "firing") {
				return a + " states " + strings.Join(states[a], ",")
			}
		}
		return ""
	})
	pg.Start(t)
	eventually(t, 120*time.Second, "outage alerts' expressions false after PostgreSQL is back", func() string {
		for _, a := range outageAlerts {
			if res, err := prom.query(exprs[a]); err != nil || len(res) != 0 {
				return a + ": " + describe(res, err)
			}
		}
		return ""
	})
	send()
	time.Sleep(5 * time.Second)

	// Every rule evaluated without error against the real series.
	rules, err := prom.alertRules()
	if err != nil {
		t.Fatalf("promtest: %v", err)
	}
	for _, r := range rules {
		if r.Health != "ok" {
			t.Errorf("promtest: rule %s health %q: %s", r.Name, r.Health, r.LastError)
		}
	}

	// Every metric a rule or a dashboard query names is exported: a query
	// half (`a or b`) or an alert on a name nobody exports is never true.
	var names []string
	if err := prom.api("/api/v1/label/__name__/values", nil, &names); err != nil {
		t.Fatalf("promtest: %v", err)
	}
	queries, vars := dashboardQueries(t, sc.Namespace)
	var texts []string
	for _, r := range rules {
		texts = append(texts, "rule "+r.Name+": "+r.Query)
	}
	for _, q := range queries {
		texts = append(texts, q.String())
	}
	if missing := unexportedMetrics(names, texts); len(missing) > 0 {
		t.Errorf("promtest: metrics named by rules or dashboard queries that neither binary exported during the run:\n  %s",
			strings.Join(missing, "\n  "))
	}

	// Every dashboard query, over the whole run.
	// The template variables offer this release's namespace, and its full
	// name taken from the ingestor's job, which the relay's job shares.
	if want := `label_values(route_passport_ingest_ready, namespace)`; vars["namespace"].Definition != want {
		t.Errorf("promtest: the $namespace variable's query changed (%q, this test runs %q): update this test", vars["namespace"].Definition, want)
	}
	if res, err := prom.query(`group by (namespace) (route_passport_ingest_ready{namespace="` + sc.Namespace + `"})`); err != nil || len(res) != 1 {
		t.Errorf("promtest: the $namespace variable would not offer %s: %s", sc.Namespace, describe(res, err))
	}
	rel := vars["release"]
	if want := `label_values(route_passport_ingest_ready{namespace="$namespace"}, job)`; rel.Definition != want || rel.Regex != `/^(.+)-ingestor$/` {
		t.Errorf("promtest: the $release variable changed (%q, regex %q): update this test", rel.Definition, rel.Regex)
	}
	res, err := prom.query(`group by (job) (route_passport_ingest_ready{namespace="` + sc.Namespace + `"})`)
	var offered []string
	for _, s := range res {
		if m := regexp.MustCompile(`^(.+)-ingestor$`).FindStringSubmatch(s.Metric["job"]); m != nil {
			offered = append(offered, m[1])
		}
	}
	if err != nil || len(offered) != 1 || offered[0] != release || relayJob != release+"-outbox-relay" {
		t.Errorf("promtest: the $release variable would offer %v (want %s alone, the relay's job %s): %s", offered, release, relayJob, describe(res, err))
	}
	var empty []string
	for _, q := range queries {
		res, err := prom.queryRange(q.expr, start, time.Now())
		if err != nil {
			empty = append(empty, q.String()+" -> "+err.Error())
			continue
		}
		ok := false
		for _, s := range res {
			ok = ok || s.hasNumber()
		}
		if !ok {
			empty = append(empty, q.String())
		}
	}
	sort.Strings(empty)
	t.Logf("promtest: %d dashboard queries run, %d without data", len(queries), len(empty))
	if len(empty) > 0 {
		t.Errorf("promtest: dashboard queries that returned no series with a number during the run (a panel that cannot show data):\n  %s",
			strings.Join(empty, "\n  "))
	}
}

// pausedRE finds the paused gauge, with its selector, in a query.
var pausedRE = regexp.MustCompile(`route_passport_outbox_paused\{[^}]*\}`)

// relayScalerQuery is the PromQL of the relay's ScaledObject (keda.json of
// charts/test/cmd/promextract).
func relayScalerQuery(t *testing.T, dir string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, "keda.json"))
	if err != nil {
		t.Fatalf("promtest: %v", err)
	}
	var queries map[string]string
	if err := json.Unmarshal(raw, &queries); err != nil {
		t.Fatalf("promtest: keda.json: %v", err)
	}
	q := queries[relayJob]
	if q == "" {
		t.Fatalf("promtest: keda.json has no prometheus query for ScaledObject %s: %s", relayJob, raw)
	}
	return q
}

// invalidExamples are the contract's invalid input records.
func invalidExamples(t *testing.T) []testenv.Record {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(repoRoot, "testdata", "contract", "invalid-*"))
	if err != nil || len(files) == 0 {
		t.Fatalf("promtest: no testdata/contract/invalid-* files: %v", err)
	}
	var recs []testenv.Record
	for _, f := range files {
		v, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, testenv.Record{Value: v})
	}
	return recs
}

var metricName = regexp.MustCompile(`\broute_passport_\w+`)

// unexportedMetrics returns, for each text naming a service metric that is not
// in names, "metric (text)".
func unexportedMetrics(names, texts []string) []string {
	have := map[string]bool{}
	for _, n := range names {
		have[n] = true
	}
	var out []string
	for _, txt := range texts {
		for _, m := range metricName.FindAllString(txt, -1) {
			if !have[m] {
				out = append(out, m+" ("+txt+")")
			}
		}
	}
	sort.Strings(out)
	return slices.Compact(out)
}

func number(s series) float64 {
	str, _ := s.Value[1].(string)
	f, _ := strconv.ParseFloat(str, 64)
	return f
}

package promtest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// prometheusBin is Debian's prometheus package (the server 2.42, as .ci/run
// installs it).
const prometheusBin = "/usr/bin/prometheus"

// Job names: the ServiceMonitor's job label is the Service name, here for
// release "pcp" as chart-check.sh renders it.
const (
	namespace   = "routes"
	ingestorJob = "pcp-pcp-route-processing-ingestor"
	relayJob    = "pcp-pcp-route-processing-outbox-relay"
)

// scrapeSettings is scrape.json of charts/test/cmd/promextract.
type scrapeSettings struct {
	Namespace     string `json:"namespace"`
	Path          string `json:"path"`
	Port          string `json:"port"`
	Interval      string `json:"interval"`
	ScrapeTimeout string `json:"scrapeTimeout"`
}

// monitoringFiles returns the directory holding rules.yaml and scrape.json.
func monitoringFiles(t *testing.T) string {
	t.Helper()
	if d := os.Getenv("PCP_MONITORING_DIR"); d != "" {
		return d
	}
	d := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", filepath.Join("..", "chart-check.sh"), "--monitoring-out", d)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtest: render the chart's monitoring (bash scripts/chart-check.sh --monitoring-out; needs go and the module proxy): %v\n%s", err, out)
	}
	return d
}

// target is one scraped binary.
type target struct {
	job, pod, addr string
}

// prometheus is a throwaway server on 127.0.0.1.
type prometheus struct {
	url    string
	client *http.Client
}

// forLine finds every alert's `for`, which startPrometheus shortens to 2s so that /api/v1/alerts shows the
// outage alert firing within seconds; the expressions are the chart's, as
// rendered.
var forLine = regexp.MustCompile(`(?m)^(\s+for: ).*$`)

// startPrometheus writes a config scraping targets with the chart's path and
// labels and the chart's rules, and starts the server.
//
// The scrape interval is 1s, not the chart's (30s): the test must see a
// readiness change, rates over a few samples and a database outage within
// seconds of real time; what the test takes from the ServiceMonitor is what
// decides whether a series can be seen at all — the path, the job label
// (Service name) and the namespace/pod labels a ServiceMonitor target gets.
func startPrometheus(t *testing.T, dir string, sc scrapeSettings, targets []target) *prometheus {
	t.Helper()
	if _, err := os.Stat(prometheusBin); err != nil {
		t.Fatalf("promtest: no Prometheus server at %s: apt-get install prometheus (.ci/run does)", prometheusBin)
	}
	rules, err := os.ReadFile(filepath.Join(dir, "rules.yaml"))
	if err != nil {
		t.Fatalf("promtest: %v", err)
	}
	work := t.TempDir()
	rulesPath := filepath.Join(work, "rules.yaml")
	if err := os.WriteFile(rulesPath, forLine.ReplaceAll(rules, []byte("${1}2s")), 0o644); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n")
	fmt.Fprintf(&b, "rule_files:\n  - %s\nscrape_configs:\n", rulesPath)
	for _, tg := range targets {
		fmt.Fprintf(&b, "  - job_name: %s\n    metrics_path: %s\n    static_configs:\n      - targets: [%q]\n", tg.job, sc.Path, tg.addr)
		fmt.Fprintf(&b, "        labels: {namespace: %q, pod: %q, service: %q, endpoint: %q}\n", sc.Namespace, tg.pod, tg.job, sc.Port)
	}
	cfg := filepath.Join(work, "prometheus.yml")
	if err := os.WriteFile(cfg, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	logf, err := os.Create(filepath.Join(work, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(prometheusBin, "--config.file="+cfg, "--storage.tsdb.path="+filepath.Join(work, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatalf("promtest: start prometheus: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		logf.Close()
		if t.Failed() {
			out, _ := os.ReadFile(logf.Name())
			t.Logf("promtest: prometheus log:\n%s\nconfig:\n%s", out, b.String())
		}
	})
	p := &prometheus{url: "http://" + addr, client: &http.Client{Timeout: 5 * time.Second}}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := p.client.Get(p.url + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("promtest: prometheus not ready after 30s: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// series is one result of a query or query_range.
type series struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`  // instant
	Values [][2]any          `json:"values"` // range
}

// hasNumber reports whether the series has a sample that is a number (not
// NaN, which is what histogram_quantile gives over no observations: a panel
// that draws nothing).
func (s series) hasNumber() bool {
	isNum := func(v [2]any) bool {
		str, _ := v[1].(string)
		return str != "" && str != "NaN"
	}
	if s.Value[1] != nil && isNum(s.Value) {
		return true
	}
	for _, v := range s.Values {
		if isNum(v) {
			return true
		}
	}
	return false
}

// api GETs path with params and decodes data into out.
func (p *prometheus) api(path string, params url.Values, out any) error {
	resp, err := p.client.Get(p.url + path + "?" + params.Encode())
	if err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var env struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		return fmt.Errorf("GET %s: %s: %w", path, body, err)
	}
	if env.Status != "success" {
		return fmt.Errorf("GET %s %v: %s", path, params, env.Error)
	}
	return json.Unmarshal(env.Data, out)
}

// query runs an instant query.
func (p *prometheus) query(expr string) ([]series, error) {
	var d struct {
		Result []series `json:"result"`
	}
	err := p.api("/api/v1/query", url.Values{"query": {expr}}, &d)
	return d.Result, err
}

// queryRange runs a range query with a 1s step.
func (p *prometheus) queryRange(expr string, from, to time.Time) ([]series, error) {
	var d struct {
		Result []series `json:"result"`
	}
	err := p.api("/api/v1/query_range", url.Values{
		"query": {expr}, "start": {ts(from)}, "end": {ts(to)}, "step": {"1"},
	}, &d)
	return d.Result, err
}

func ts(t time.Time) string { return fmt.Sprintf("%.3f", float64(t.UnixMilli())/1000) }

// alertStates returns alert name -> states ("pending", "firing") of the
// active alerts.
func (p *prometheus) alertStates() (map[string][]string, error) {
	var d struct {
		Alerts []struct {
			Labels map[string]string `json:"labels"`
			State  string            `json:"state"`
		} `json:"alerts"`
	}
	if err := p.api("/api/v1/alerts", nil, &d); err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for _, a := range d.Alerts {
		out[a.Labels["alertname"]] = append(out[a.Labels["alertname"]], a.State)
	}
	return out, nil
}

// ruleInfo is one alerting rule as loaded by the server.
type ruleInfo struct {
	Name      string `json:"name"`
	Query     string `json:"query"`
	Health    string `json:"health"`
	LastError string `json:"lastError"`
}

func (p *prometheus) alertRules() ([]ruleInfo, error) {
	var d struct {
		Groups []struct {
			Rules []ruleInfo `json:"rules"`
		} `json:"groups"`
	}
	if err := p.api("/api/v1/rules", url.Values{"type": {"alert"}}, &d); err != nil {
		return nil, err
	}
	var out []ruleInfo
	for _, g := range d.Groups {
		out = append(out, g.Rules...)
	}
	return out, nil
}

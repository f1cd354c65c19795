package main

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/pcp/route-processing/pkg/e2e"
	"github.com/pcp/route-processing/pkg/obs"
	"github.com/pcp/route-processing/pkg/testenv"
)

// The latency budget (issue 13, item 2): the service's stage histograms
// (stageMetric, one series per "stage" label, each binary its own stages),
// scraped from both binaries' /metrics at the start and the end of each
// latency run, so that the table covers exactly the measured records; and
// the bench's own last stage, output record timestamp → output consumer.
// Stage names are read from the exposition, never listed here: a stage
// the service adds shows up, ordered by the points of the path it names.

// stageMetric is the histogram the service's binaries export.
const stageMetric = obs.StageMetric

// The bench's own stages: its measurement of the last hop, and the disk
// under a commit (diskprobe.go).
const (
	benchStage = "reported_to_output_consumer"
	diskStage  = "commit_fsync"
)

// benchStageHelp says how the bench takes each of its own stages.
var benchStageHelp = map[string]string{
	benchStage: "output record timestamp → output consumer; the timestamp is the relay producer's CreateTime, 1 ms resolution",
	diskStage:  "the disk alone, no commit is faster: an 8-kB write + fdatasync beside PostgreSQL's data directory every 50 ms during the run",
}

// histogram is one cumulative Prometheus histogram: upper bounds
// (ascending, +Inf last) with their cumulative counts.
type histogram struct {
	le     []float64
	counts []float64
	count  float64
}

// parseStageHistograms reads every series of name's histogram from a text
// exposition, by its stage label.
func parseStageHistograms(body, name string) map[string]*histogram {
	type bucket struct{ le, n float64 }
	buckets := map[string][]bucket{}
	counts := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"_") {
			continue
		}
		metric, labels, value, ok := splitSample(line)
		if !ok {
			continue
		}
		stage, ok := labels["stage"]
		if !ok {
			continue
		}
		switch metric {
		case name + "_bucket":
			le, err := strconv.ParseFloat(labels["le"], 64)
			if err != nil {
				continue
			}
			buckets[stage] = append(buckets[stage], bucket{le, value})
		case name + "_count":
			counts[stage] = value
		}
	}
	out := map[string]*histogram{}
	for stage, bs := range buckets {
		sort.Slice(bs, func(i, j int) bool { return bs[i].le < bs[j].le })
		h := &histogram{count: counts[stage]}
		for _, b := range bs {
			h.le, h.counts = append(h.le, b.le), append(h.counts, b.n)
		}
		if h.count == 0 && len(h.counts) > 0 {
			h.count = h.counts[len(h.counts)-1]
		}
		out[stage] = h
	}
	return out
}

// splitSample splits `metric{k="v",...} value [timestamp]`.
func splitSample(line string) (metric string, labels map[string]string, value float64, ok bool) {
	labels = map[string]string{}
	i := strings.IndexAny(line, "{ ")
	if i < 0 {
		return "", nil, 0, false
	}
	metric, rest := line[:i], line[i:]
	if rest[0] == '{' {
		rest = rest[1:]
		for {
			rest = strings.TrimLeft(rest, " ,")
			if strings.HasPrefix(rest, "}") {
				rest = rest[1:]
				break
			}
			eq := strings.IndexByte(rest, '=')
			if eq < 0 || eq+1 >= len(rest) || rest[eq+1] != '"' {
				return "", nil, 0, false
			}
			k := strings.TrimSpace(rest[:eq])
			rest = rest[eq+2:]
			var v strings.Builder
			closed := false
			for j := 0; j < len(rest); j++ {
				c := rest[j]
				if c == '\\' && j+1 < len(rest) {
					j++
					switch rest[j] {
					case 'n':
						v.WriteByte('\n')
					default:
						v.WriteByte(rest[j])
					}
					continue
				}
				if c == '"' {
					rest, closed = rest[j+1:], true
					break
				}
				v.WriteByte(c)
			}
			if !closed {
				return "", nil, 0, false
			}
			labels[k] = v.String()
		}
	}
	f := strings.Fields(rest)
	if len(f) == 0 {
		return "", nil, 0, false
	}
	value, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return "", nil, 0, false
	}
	return metric, labels, value, true
}

// sub is h minus an earlier scrape of the same series (nil: nothing).
func (h *histogram) sub(earlier *histogram) *histogram {
	if earlier == nil || len(earlier.counts) != len(h.counts) {
		return h
	}
	d := &histogram{le: h.le, counts: make([]float64, len(h.counts)), count: h.count - earlier.count}
	for i := range h.counts {
		d.counts[i] = h.counts[i] - earlier.counts[i]
	}
	return d
}

// quantile interpolates linearly inside the bucket holding the q-th
// observation, as PromQL's histogram_quantile; in the +Inf bucket it
// returns the highest finite bound. NaN when empty.
func (h *histogram) quantile(q float64) float64 {
	if h == nil || h.count <= 0 || len(h.counts) == 0 {
		return math.NaN()
	}
	rank := q * h.count
	for i, c := range h.counts {
		if c < rank {
			continue
		}
		if math.IsInf(h.le[i], 1) {
			if i == 0 {
				return math.NaN()
			}
			return h.le[i-1]
		}
		lo, below := 0.0, 0.0
		if i > 0 {
			lo, below = h.le[i-1], h.counts[i-1]
		}
		if c == below {
			return h.le[i]
		}
		return lo + (h.le[i]-lo)*(rank-below)/(c-below)
	}
	return h.le[len(h.le)-1]
}

// stageQuantiles are one stage's figures of one run, in ms.
type stageQuantiles struct {
	binary    string
	p50, p99  float64
	count     float64
	fromBench bool
}

// scrapeStages reads the stage histograms of each process now.
func scrapeStages(procs map[string]*e2e.Proc) map[string]map[string]*histogram {
	out := map[string]map[string]*histogram{}
	for name, p := range procs {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		code, body := testenv.HTTPGet(ctx, "http://"+p.Addr()+"/metrics")
		cancel()
		if code == 200 {
			out[name] = parseStageHistograms(body, stageMetric)
		}
	}
	return out
}

// stageBudget turns two scrapes into per-stage quantiles of what happened
// between them, keyed "binary stage".
func stageBudget(before, after map[string]map[string]*histogram) map[string]stageQuantiles {
	out := map[string]stageQuantiles{}
	for bin, hs := range after {
		for stage, h := range hs {
			d := h.sub(before[bin][stage])
			if d.count <= 0 {
				continue
			}
			out[bin+" "+stage] = stageQuantiles{binary: bin, p50: 1000 * d.quantile(0.50), p99: 1000 * d.quantile(0.99), count: d.count}
		}
	}
	return out
}

// pathPoints are the points of a passport's path, in order, each with the
// words a stage name may use for it; a stage "<from>_to_<to>" is ordered
// by its points.
var pathPoints = [][]string{
	{"input", "timestamp", "produced", "sent"},
	{"fetched", "fetch", "polled", "poll"},
	{"parsed", "parse", "validated"},
	{"committed", "commit", "written", "write", "created", "inserted"},
	{"notify", "notified", "woke", "wakeup"},
	{"claimed", "claim"},
	{"reported", "report", "delivered", "delivery", "published", "acked"},
	{"output", "consumer", "consumed"},
}

// pointRank is the path point a part of a stage name names (the first
// known word in it), or -1.
func pointRank(part string) int {
	for _, w := range strings.Split(part, "_") {
		for i, words := range pathPoints {
			for _, k := range words {
				if w == k {
					return i
				}
			}
		}
	}
	return -1
}

// stageOrder sorts stage names along the path: by the point they end at,
// then the later start first (so that a span covering several stages, e.g.
// created_to_published, follows its parts as a subtotal), then by name;
// names naming no known point come last, by name.
func stageOrder(stages []string) []string {
	type key struct {
		from, to int
		name     string
	}
	keys := make([]key, len(stages))
	for i, s := range stages {
		name := s
		if _, st, ok := strings.Cut(s, " "); ok {
			name = st // "binary stage"
		}
		from, to := name, name
		if f, t, ok := strings.Cut(name, "_to_"); ok {
			from, to = f, t
		}
		k := key{pointRank(from), pointRank(to), s}
		if k.from < 0 && k.to < 0 {
			k.from, k.to = len(pathPoints), len(pathPoints)
		} else if k.from < 0 {
			k.from = k.to
		} else if k.to < 0 {
			k.to = k.from
		}
		keys[i] = k
	}
	sort.SliceStable(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if a.to != b.to {
			return a.to < b.to
		}
		if a.from != b.from {
			return a.from > b.from
		}
		return a.name < b.name
	})
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = k.name
	}
	return out
}

// budgetTable renders the median over runs of each stage's p50 and p99,
// one column pair per series (rate). A series whose runs found no service
// stage says so: the budget is then the bench's own stage only.
func budgetTable(series []*latencySeries) string {
	names := map[string]bool{}
	service := false
	for _, s := range series {
		for _, run := range s.stages {
			for k, q := range run {
				names[k] = true
				if !q.fromBench {
					service = true
				}
			}
		}
	}
	if len(names) == 0 {
		return "No stage figures (no latency run completed).\n"
	}
	var sb strings.Builder
	if !service {
		fmt.Fprintf(&sb, "The budget is unavailable: neither binary exports `%s{stage=...}` yet (the stage histograms of issue 13 are not merged), so only the bench's own last stage is shown.\n\n", stageMetric)
	}
	sb.WriteString("| Stage | Measured by |")
	for _, s := range series {
		fmt.Fprintf(&sb, " p50 ms at %s/s | p99 ms at %s/s |", groupDigits(int64(s.rate)), groupDigits(int64(s.rate)))
	}
	sb.WriteString("\n|---|---|")
	for range series {
		sb.WriteString("---:|---:|")
	}
	sb.WriteString("\n")
	keys := make([]string, 0, len(names))
	for k := range names {
		keys = append(keys, k)
	}
	for _, k := range stageOrder(keys) {
		bin, stage, _ := strings.Cut(k, " ")
		if help, ok := benchStageHelp[stage]; ok && bin == "bench" {
			stage += " (" + help + ")"
		}
		fmt.Fprintf(&sb, "| %s | %s |", stage, bin)
		for _, s := range series {
			var p50, p99 []float64
			for _, run := range s.stages {
				if q, ok := run[k]; ok && !math.IsNaN(q.p50) {
					p50, p99 = append(p50, q.p50), append(p99, q.p99)
				}
			}
			if len(p50) == 0 {
				sb.WriteString(" — | — |")
				continue
			}
			fmt.Fprintf(&sb, " %.2f | %.2f |", median(p50), median(p99))
		}
		sb.WriteString("\n")
	}
	sb.WriteString("\nService stages are quantiles of histogram buckets (linear inside a bucket, as histogram_quantile), observed between a scrape before the run's first record and one after its last; the median over runs is shown.\n")
	return sb.String()
}

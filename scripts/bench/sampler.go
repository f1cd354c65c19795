package main

import (
	"context"
	"fmt"
	"maps"
	"os"
	"runtime"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pcp/route-processing/pkg/e2e"
	"github.com/pcp/route-processing/scripts/internal/machine"
)

// observation is what a sampler saw during one measured run.
type observation struct {
	wall        time.Duration
	procCores   map[string]float64
	pgCores     float64
	machineBusy float64
	steal       float64 // share of the machine's CPU time the host gave to others
	// brokerCores and benchCores split the harness: the dev broker's
	// process and the bench's own (its producer and consumer, and in the
	// floor and the ceilings the stand-ins it runs).
	brokerCores, benchCores float64
	switches                float64 // context switches per second, whole machine
	waits                   map[string]int
	samples                 int
	// The same wait-event samples per second since the sampler started
	// (the latency runs' seconds), to name what PostgreSQL's backends did
	// in a slow second.
	secondWaits   map[int]map[string]int
	secondSamples map[int]int
	// What each autovacuum worker was doing, per second ("VACUUM
	// public.route_passports"; a worker in another database of the
	// cluster with that database's name first, "ingest_default_0: VACUUM
	// …", since its CPU and WAL share the machine and the disk with the
	// run's): a worker's wait events alone do not say which table, nor
	// whether the outbox's unthrottled settings apply.
	secondVacuums map[int]map[string]bool
	// CPU seconds per second of the run (that is, cores) of each process
	// the run looks at (the service's, "postgres" for the cluster's
	// backends, "broker", "bench") and "machine" for all of them and the
	// rest: the whole-run averages cannot tell which process an episode
	// took its CPU from.
	secondCores map[int]map[string]float64
}

// rest is the CPU, in cores, that neither the service, PostgreSQL, the dev
// broker nor the bench process used: the kernel's own threads and anything
// else running on the machine (other test runs skew the figures; this
// column shows it).
func (o observation) rest() float64 {
	r := o.machineBusy * float64(runtime.NumCPU())
	for _, c := range o.procCores {
		r -= c
	}
	return max(0, r-o.pgCores-o.brokerCores-o.benchCores)
}

func (o observation) procCPU() string {
	var s []string
	for _, k := range slices.Sorted(maps.Keys(o.procCores)) {
		s = append(s, fmt.Sprintf("%s %.2f", k, o.procCores[k]))
	}
	return strings.Join(s, ", ")
}

func (o observation) topWaits(n int) string {
	if s := topOf(o.waits, o.samples, n); s != "" {
		return s + " (avg. backends)"
	}
	return "none active"
}

// waitsIn is topWaits for one second of the run ("" when nothing
// was active or sampled then).
func (o observation) waitsIn(sec, n int) string {
	return topOf(o.secondWaits[sec], o.secondSamples[sec], n)
}

// vacuumsIn names what autovacuum did in one second of the run, or "".
func (o observation) vacuumsIn(sec int) string {
	return strings.Join(slices.Sorted(maps.Keys(o.secondVacuums[sec])), ", ")
}

// coresIn lists the cores each process used in one second of the run,
// the machine's last ("ingestor 0.4, postgres 1.1; machine 1.9"), or "".
func (o observation) coresIn(sec int) string {
	c := o.secondCores[sec]
	if len(c) == 0 {
		return ""
	}
	var s []string
	for _, k := range slices.Sorted(maps.Keys(c)) {
		if k != machineCores {
			s = append(s, fmt.Sprintf("%s %.1f", k, c[k]))
		}
	}
	return strings.Join(s, ", ") + fmt.Sprintf("; machine %.1f", c[machineCores])
}

// machineCores is the key of the whole machine's busy cores in
// observation.secondCores.
const machineCores = "machine"

// vacuumSeconds lists, for each thing autovacuum did during the run, the
// seconds it was seen in ("VACUUM public.route_passports 12-19 s"), or
// "none".
func (o observation) vacuumSeconds() string {
	seen := map[string][]int{}
	for sec, vs := range o.secondVacuums {
		for v := range vs {
			seen[v] = append(seen[v], sec)
		}
	}
	if len(seen) == 0 {
		return "none"
	}
	var s []string
	for _, v := range slices.Sorted(maps.Keys(seen)) {
		secs := seen[v]
		slices.Sort(secs)
		var spans []string
		for i := 0; i < len(secs); {
			j := i
			for j+1 < len(secs) && secs[j+1] == secs[j]+1 {
				j++
			}
			if i == j {
				spans = append(spans, fmt.Sprintf("%d", secs[i]))
			} else {
				spans = append(spans, fmt.Sprintf("%d-%d", secs[i], secs[j]))
			}
			i = j + 1
		}
		s = append(s, v+" "+strings.Join(spans, ",")+" s")
	}
	return strings.Join(s, "; ")
}

// topOf lists the n most sampled wait events of waits with their average
// number of backends over samples, or "".
func topOf(waits map[string]int, samples, n int) string {
	type kv struct {
		k string
		v int
	}
	var all []kv
	for k, v := range waits {
		all = append(all, kv{k, v})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].v > all[j].v || all[i].v == all[j].v && all[i].k < all[j].k })
	var s []string
	for i, e := range all {
		if i == n {
			break
		}
		s = append(s, fmt.Sprintf("%s %.1f", e.k, float64(e.v)/float64(max(samples, 1))))
	}
	return strings.Join(s, ", ")
}

type sampler struct {
	stopc chan struct{}
	done  chan observation
}

// startSampler samples, every 100 ms until stop, the CPU time of procs, of
// every PostgreSQL process in pg_stat_activity of the cluster, of the whole
// machine, and the wait events of the active backends of db.
func (b *bench) startSampler(db string, procs map[string]*e2e.Proc) *sampler {
	s := &sampler{stopc: make(chan struct{}), done: make(chan observation, 1)}
	go func() {
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, b.pg.URL(db))
		start := time.Now()
		busy0, steal0, total0 := machine.CPU()
		switches0 := machine.ContextSwitches()
		brokerPID, benchPID := b.broker.Pid(), os.Getpid()
		// The CPU seconds so far of procs, the broker and the bench, by
		// secondCores' names.
		readProcs := func() map[string]float64 {
			m := map[string]float64{"broker": machine.ProcCPU(brokerPID), "bench": machine.ProcCPU(benchPID)}
			for name, p := range procs {
				m[name] = machine.ProcCPU(p.PID())
			}
			return m
		}
		first := readProcs()
		last := maps.Clone(first) // the previous tick's readings
		pgLast := map[int]float64{}
		o := observation{waits: map[string]int{}, procCores: map[string]float64{},
			secondWaits: map[int]map[string]int{}, secondSamples: map[int]int{}, secondVacuums: map[int]map[string]bool{}, secondCores: map[int]map[string]float64{}}
		lastBusy, lastTotal, lastAt := busy0, total0, start
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-s.stopc:
				wall := time.Since(start)
				o.wall = wall
				end := readProcs()
				for name := range procs {
					o.procCores[name] = (end[name] - first[name]) / wall.Seconds()
				}
				var pg float64
				for _, c := range o.secondCores {
					pg += c["postgres"]
				}
				o.pgCores = pg / wall.Seconds()
				o.brokerCores = (end["broker"] - first["broker"]) / wall.Seconds()
				o.benchCores = (end["bench"] - first["bench"]) / wall.Seconds()
				o.switches = (machine.ContextSwitches() - switches0) / wall.Seconds()
				busy1, steal1, total1 := machine.CPU()
				if total1 > total0 {
					o.machineBusy = (busy1 - busy0) / (total1 - total0)
					o.steal = (steal1 - steal0) / (total1 - total0)
				}
				if conn != nil {
					conn.Close(ctx)
				}
				s.done <- o
				return
			case <-tick.C:
			}
			sec := int(time.Since(start) / time.Second)
			if o.secondCores[sec] == nil {
				o.secondCores[sec] = map[string]float64{}
			}
			for name, c := range readProcs() {
				o.secondCores[sec][name] += c - last[name]
				last[name] = c
			}
			// The busy share since the last reading, times the cores and
			// that interval: the machine's busy CPU seconds in it.
			if busy, _, total := machine.CPU(); total > lastTotal {
				at := time.Now()
				o.secondCores[sec][machineCores] += (busy - lastBusy) / (total - lastTotal) * float64(runtime.NumCPU()) * at.Sub(lastAt).Seconds()
				lastBusy, lastTotal, lastAt = busy, total, at
			}
			if err != nil || conn == nil {
				continue
			}
			qctx, cancel := context.WithTimeout(ctx, time.Second)
			rows, qerr := conn.Query(qctx, `select pid, coalesce(datname, ''), coalesce(state = 'active', false),
				coalesce(wait_event_type || ':' || wait_event, 'CPU'),
				case when backend_type = 'autovacuum worker' then regexp_replace(coalesce(query, ''), '^autovacuum: ', '') else '' end
				from pg_stat_activity where pid <> pg_backend_pid()`)
			if qerr == nil {
				o.samples++
				o.secondSamples[sec]++
				if o.secondWaits[sec] == nil {
					o.secondWaits[sec] = map[string]int{}
				}
				for rows.Next() {
					var pid int
					var active bool
					var dbName, wait, vacuum string
					if rows.Scan(&pid, &dbName, &active, &wait, &vacuum) != nil {
						continue
					}
					ours := dbName == db
					c := machine.ProcCPU(pid)
					// A backend's CPU counts from its first sample on.
					if prev, ok := pgLast[pid]; ok {
						o.secondCores[sec]["postgres"] += c - prev
					}
					pgLast[pid] = c
					if ours && active {
						o.waits[wait]++
						o.secondWaits[sec][wait]++
					}
					if vacuum != "" {
						if !ours {
							vacuum = dbName + ": " + vacuum
						}
						if o.secondVacuums[sec] == nil {
							o.secondVacuums[sec] = map[string]bool{}
						}
						o.secondVacuums[sec][vacuum] = true
					}
				}
				rows.Close()
			}
			cancel()
		}
	}()
	return s
}

func (s *sampler) stop() observation {
	close(s.stopc)
	return <-s.done
}

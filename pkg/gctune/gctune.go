// Package gctune sets the Go garbage collector of a service process: GOGC
// above Go's default, and a soft memory limit below the container's, so
// that the larger heap it allows never meets the OOM killer. GOGC and
// GOMEMLIMIT set in the environment win over both.
package gctune

import (
	"bufio"
	"context"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
)

// DefaultGCPercent is the GOGC the binaries run with unless GOGC is set.
// Both allocate per record (the ingestor a batch's parse trees and its
// bind message, the relay a claim's rows and the producer's copies) and
// keep little between batches, so at Go's 100 they collect several times a
// second, and the scavenger hands pages back to the kernel between batches
// that the next one takes again as page faults (GC and page faults were
// a fifth of the ingestor's CPU profile at 1,000 passports/s). Measured
// with make bench's latency phase at 1,000 passports/s on the 2-core
// machine, six interleaved runs each (2026-12-01 19:52–20:12 UTC, machine
// 84–91 % busy): ingestor CPU median 0.40 cores (0.37–0.41) against 0.45
// (0.41–0.46) at 100; e2e p50 35 ms (30–138) against 93 (32–131), p99 193
// ms (116–1,775) against 436 (195–1,158), spreads that overlap. The price
// is memory: peak RSS in the ingest phase (a 25,000-record backlog) 351 MB
// against 181 for the ingestor, 71 against 55 for the relay, inside the
// chart's limits (512 Mi, 256 Mi) and bounded by the soft limit below.
const DefaultGCPercent = 300

// limitShare of the cgroup's memory limit becomes the Go soft limit: the
// rest is for memory the Go heap does not count (librdkafka's queues and
// buffers, thread stacks, the runtime's own).
const limitShare = 0.75

// Settings are the collector's settings in effect after Apply.
type Settings struct {
	// GCPercent is GOGC.
	GCPercent int
	// MemoryLimit is the soft limit in bytes; math.MaxInt64 means none.
	MemoryLimit int64
	// CgroupLimit is the container's memory limit found, 0 when none.
	CgroupLimit int64
}

// Apply sets GOGC to DefaultGCPercent unless environ sets GOGC, and the
// soft memory limit to limitShare of the memory limit of the cgroup under
// cgroupRoot (/sys/fs/cgroup in production) unless environ sets GOMEMLIMIT.
func Apply(environ []string, cgroupRoot string) Settings {
	set := map[string]bool{}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok && v != "" {
			set[k] = true
		}
	}
	if !set["GOGC"] {
		debug.SetGCPercent(DefaultGCPercent)
	}
	s := Settings{CgroupLimit: cgroupMemoryLimit(cgroupRoot)}
	if !set["GOMEMLIMIT"] && s.CgroupLimit > 0 {
		debug.SetMemoryLimit(int64(float64(s.CgroupLimit) * limitShare))
	}
	// Each setter returns the setting it replaced: set it back to read it.
	s.GCPercent = debug.SetGCPercent(-1)
	debug.SetGCPercent(s.GCPercent)
	s.MemoryLimit = debug.SetMemoryLimit(-1)
	return s
}

// Log writes the settings at start-up.
func (s Settings) Log(ctx context.Context, logger *slog.Logger) {
	args := []any{"gogc", s.GCPercent}
	if s.MemoryLimit != math.MaxInt64 {
		args = append(args, "memory_limit_bytes", s.MemoryLimit)
	}
	if s.CgroupLimit > 0 {
		args = append(args, "cgroup_memory_limit_bytes", s.CgroupLimit)
	}
	logger.InfoContext(ctx, "garbage collector", args...)
}

// cgroupMemoryLimit reads the memory limit of the process's cgroup: cgroup
// v2's memory.max under root, else v1's memory/memory.limit_in_bytes. It
// returns 0 for none ("max", or v1's page-rounded MaxInt64) or when
// neither can be read.
func cgroupMemoryLimit(root string) int64 {
	for _, p := range []string{filepath.Join(root, "memory.max"), filepath.Join(root, "memory", "memory.limit_in_bytes")} {
		f, err := os.Open(p)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		line := ""
		if sc.Scan() {
			line = strings.TrimSpace(sc.Text())
		}
		f.Close()
		n, err := strconv.ParseInt(line, 10, 64)
		if err != nil || n <= 0 || n >= math.MaxInt64/2 {
			return 0
		}
		return n
	}
	return 0
}

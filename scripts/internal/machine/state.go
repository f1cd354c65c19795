package machine

import (
	"os"
	"strings"
)

// CPUModel is the "model name" of the first CPU in /proc/cpuinfo, or ""
// when unknown.
func CPUModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// LoadAvg is /proc/loadavg as it stands (the 1, 5 and 15 minute load
// averages, runnable/all tasks, the last pid), or "" when unknown.
func LoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// Writeback is the kernel's page-cache writeback thresholds
// (/proc/sys/vm): the background threshold, in bytes when set, else as a
// ratio of memory, and the age at which dirty pages are written, e.g.
// "dirty_background_ratio=10 dirty_expire_centisecs=3000", or "" when
// unknown. A PostgreSQL whose data and WAL share a disk waits with its
// fsyncs behind the bursts of writeback they allow (docs/performance.md).
func Writeback() string {
	read := func(name string) string {
		b, err := os.ReadFile("/proc/sys/vm/" + name)
		if err != nil {
			return ""
		}
		return name + "=" + strings.TrimSpace(string(b))
	}
	threshold := read("dirty_background_bytes")
	if threshold == "" || strings.HasSuffix(threshold, "=0") {
		threshold = read("dirty_background_ratio")
	}
	return strings.TrimSpace(threshold + " " + read("dirty_expire_centisecs"))
}

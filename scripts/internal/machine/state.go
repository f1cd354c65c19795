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

//go:build soak

package soak

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// The readers of /proc below duplicate the small procCPU and machineCPU of
// scripts/bench (kept apart while that package is being split); the
// PostgreSQL total, which counts exited children, is new here.

// procStat returns the fields after the command name of /proc/pid/stat.
func procStat(pid int) []string {
	if pid <= 0 {
		return nil
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(s[i+1:])
}

// procCPU is the CPU seconds (user + system) of pid so far; with children,
// also those of its exited and reaped children.
func procCPU(pid int, children bool) float64 {
	f := procStat(pid)
	if len(f) < 15 {
		return 0
	}
	sum := 0.0
	last := 12 // utime, stime = fields 14, 15 of the line = f[11], f[12]
	if children {
		last = 14 // cutime, cstime
	}
	for i := 11; i <= last; i++ {
		x, _ := strconv.ParseFloat(f[i], 64)
		sum += x
	}
	return sum / 100 // USER_HZ
}

// postgresCPU is the CPU seconds of the whole cluster so far: the postmaster
// with its reaped children (exited backends and autovacuum workers) plus
// every live child.
func postgresCPU(postmaster int) float64 {
	total := procCPU(postmaster, true)
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	pm := strconv.Itoa(postmaster)
	for _, d := range dirs {
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil {
			continue
		}
		f := procStat(pid)
		if len(f) > 1 && f[1] == pm { // f[1] is the parent pid
			total += procCPU(pid, false)
		}
	}
	return total
}

// parentPID is the parent of pid (0 when unknown).
func parentPID(pid int) int {
	f := procStat(pid)
	if len(f) < 2 {
		return 0
	}
	n, _ := strconv.Atoi(f[1])
	return n
}

// machineCPU returns busy and total jiffies of all CPUs.
func machineCPU() (busy, total float64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	for i, v := range f[1:] {
		if i >= 8 { // guest time is already in user
			break
		}
		x, _ := strconv.ParseFloat(v, 64)
		total += x
		if i != 3 && i != 4 { // idle, iowait
			busy += x
		}
	}
	return busy, total
}

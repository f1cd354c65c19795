// Package machine reads what scripts/bench and scripts/soak report about the
// machine they run on: the CPU time of processes and of all CPUs (from
// /proc), and the CPU model and load average for the reports' machine
// state. Linux only; a value it cannot read is zero or empty, so that a
// report shows it as missing instead of ending the run.
package machine

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// userHZ is the kernel's clock tick of /proc times (USER_HZ).
const userHZ = 100

// procStat returns the fields after the command name of /proc/pid/stat.
func procStat(pid int) []string {
	if pid <= 0 {
		return nil
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	// The command name is parenthesised and may hold spaces and ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(s[i+1:])
}

// sumTicks is the sum of the fields first..last of f, in seconds.
func sumTicks(f []string, first, last int) float64 {
	if len(f) <= last {
		return 0
	}
	sum := 0.0
	for i := first; i <= last; i++ {
		x, _ := strconv.ParseFloat(f[i], 64)
		sum += x
	}
	return sum / userHZ
}

// ProcCPU is the CPU seconds (user + system) of pid so far.
func ProcCPU(pid int) float64 {
	// utime, stime: fields 14, 15 of the line = f[11], f[12].
	return sumTicks(procStat(pid), 11, 12)
}

// ProcCPUWithChildren is ProcCPU plus the CPU seconds of pid's exited and
// reaped children (cutime, cstime).
func ProcCPUWithChildren(pid int) float64 {
	return sumTicks(procStat(pid), 11, 14)
}

// PostgresCPU is the CPU seconds of a whole PostgreSQL cluster so far: the
// postmaster with its reaped children (exited backends and autovacuum
// workers) plus every live child.
func PostgresCPU(postmaster int) float64 {
	total := ProcCPUWithChildren(postmaster)
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil {
			continue
		}
		if ParentPID(pid) == postmaster {
			total += ProcCPU(pid)
		}
	}
	return total
}

// ParentPID is the parent of pid (0 when unknown).
func ParentPID(pid int) int {
	f := procStat(pid)
	if len(f) < 2 {
		return 0
	}
	n, _ := strconv.Atoi(f[1])
	return n
}

// CPU returns the busy, stolen and total jiffies of all CPUs so far; a
// share over an interval is the ratio of two differences. Busy is the time
// this machine ran anything; stolen is the time its virtual CPUs wanted to
// run and the host ran something else (another tenant), which the
// processes' own CPU times do not show and which slows all of them alike.
func CPU() (busy, steal, total float64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 2 {
		return 0, 0, 0
	}
	// user nice system idle iowait irq softirq steal (guest time is
	// already in user).
	for i, v := range f[1:] {
		if i >= 8 {
			break
		}
		x, _ := strconv.ParseFloat(v, 64)
		total += x
		switch i {
		case 3, 4: // idle, iowait
		case 7:
			steal += x
		default:
			busy += x
		}
	}
	return busy, steal, total
}

// ContextSwitches returns the context switches of all CPUs since boot
// (/proc/stat ctxt). On a virtual machine whose switches cost the host a
// trap, their rate explains CPU that no process's own work accounts for.
func ContextSwitches() float64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "ctxt "); ok {
			x, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return x
		}
	}
	return 0
}

package testenv

import (
	"syscall"
	"testing"
	"time"
)

// ProcessCPU is the CPU time (user and system) this process has used so
// far. Benchmarks divide it by their records: a cost per record moves less
// than a rate on a shared machine. It counts whatever else runs in the
// process, such as an in-process kfake broker.
func ProcessCPU(t testing.TB) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

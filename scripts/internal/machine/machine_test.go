package machine

import (
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// The readers must see this process and this machine: a broken field index
// reads zero, which would make every CPU column of the reports zero.
func TestReadsThisProcessAndMachine(t *testing.T) {
	before := ProcCPU(os.Getpid())
	// Burn CPU until a tick is counted, for at most 5 s.
	for end := time.Now().Add(5 * time.Second); ProcCPU(os.Getpid()) <= before; {
		if time.Now().After(end) {
			t.Fatalf("ProcCPU stays at %v after 5 s of work", before)
		}
		_ = strings.Repeat("x", 1000)
	}
	if got := ProcCPUWithChildren(os.Getpid()); got < ProcCPU(os.Getpid()) {
		t.Errorf("ProcCPUWithChildren = %v, below ProcCPU", got)
	}
	if got := ParentPID(os.Getpid()); got != os.Getppid() {
		t.Errorf("ParentPID = %d, want %d", got, os.Getppid())
	}
	if busy, steal, total := CPU(); busy <= 0 || steal < 0 || total < busy+steal {
		t.Errorf("CPU() = %v busy, %v stolen of %v", busy, steal, total)
	}
	if PostgresCPU(os.Getppid()) < ProcCPU(os.Getpid()) {
		t.Errorf("PostgresCPU of our parent does not count this child")
	}
	if len(strings.Fields(LoadAvg())) < 3 {
		t.Errorf("LoadAvg() = %q", LoadAvg())
	}
	if w := Writeback(); !strings.Contains(w, "dirty_background_") || !strings.Contains(w, "dirty_expire_centisecs=") {
		t.Errorf("Writeback() = %q", w)
	}
	if ProcCPU(-1) != 0 || ParentPID(0) != 0 {
		t.Errorf("an unknown pid reads non-zero")
	}
}

// ContextSwitches must count switches: two goroutines on their own threads
// handing a token back and forth switch at least once per hand-over.
func TestContextSwitchesCounts(t *testing.T) {
	const handovers = 2000
	before := ContextSwitches()
	if before <= 0 {
		t.Fatalf("ContextSwitches() = %v: the ctxt line of /proc/stat was not read", before)
	}
	ping, pong := make(chan struct{}), make(chan struct{})
	go func() {
		runtime.LockOSThread()
		for range ping {
			pong <- struct{}{}
		}
	}()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for range handovers {
		ping <- struct{}{}
		<-pong
	}
	close(ping)
	if got := ContextSwitches() - before; got < handovers {
		t.Errorf("%v context switches counted over %d hand-overs between two threads", got, handovers)
	}
}

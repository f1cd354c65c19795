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

// MeasureCapacity must measure: a broken timing reads zero or an absurd
// figure, which would make the reports' capacity lines say nothing.
func TestMeasureCapacity(t *testing.T) {
	c := MeasureCapacity(1)
	if c.CPUs != runtime.NumCPU() {
		t.Errorf("CPUs = %d, want %d", c.CPUs, runtime.NumCPU())
	}
	if c.OneCore <= 0 || c.AllCores <= 0 {
		t.Fatalf("hash rates %v and %v MB/s", c.OneCore, c.AllCores)
	}
	// All cores at once cannot do much more than CPUs times one core's
	// work (a little more when one core alone ran at a lower clock).
	if got := c.Cores(); got < 0.2 || got > 1.3*float64(c.CPUs) {
		t.Errorf("Cores() = %.2f of %d CPUs", got, c.CPUs)
	}
	for name, d := range map[string]time.Duration{"system call": c.Syscall, "page fault": c.PageFault, "thread switch": c.Switch} {
		if d <= 0 || d > 10*time.Millisecond {
			t.Errorf("%s took %v", name, d)
		}
	}
	if s := c.String(); !strings.Contains(s, "cores' worth") || strings.Contains(s, "n/a") {
		t.Errorf("String() = %q", s)
	}
}

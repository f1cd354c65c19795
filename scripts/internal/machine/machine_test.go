package machine

import (
	"os"
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
	if ProcCPU(-1) != 0 || ParentPID(0) != 0 {
		t.Errorf("an unknown pid reads non-zero")
	}
}

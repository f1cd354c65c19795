//go:build linux

package machine

import (
	"os"
	"runtime"
	"syscall"
	"time"
)

// kernelCosts times the three ways the processes of a benchmark enter the
// kernel most: system calls (every socket read and write), page faults
// (a heap's growth, PostgreSQL's buffers) and switches between threads
// (every hand-over between the service, PostgreSQL and the broker). On a
// paravirtualised VM each is a trap to the host, and its price is the
// host's, not the guest's.
func kernelCosts() kernelCost {
	return kernelCost{syscall: syscallTime(), pageFault: pageFaultTime(), switchTime: switchTime()}
}

func syscallTime() time.Duration {
	const n = 100_000
	start := time.Now()
	for range n {
		syscall.Getppid()
	}
	return time.Since(start) / n
}

// pageFaultTime touches every page of fresh anonymous mappings, 4 MB at a
// time.
func pageFaultTime() time.Duration {
	const size, maps = 4 << 20, 4
	page := os.Getpagesize()
	start := time.Now()
	for range maps {
		m, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
		if err != nil {
			return 0
		}
		for i := 0; i < len(m); i += page {
			m[i] = 1
		}
		_ = syscall.Munmap(m)
	}
	return time.Since(start) / time.Duration(maps*size/page)
}

// switchTime sends one byte back and forth between two threads over two
// pipes: each leg wakes the other thread and blocks this one.
func switchTime() time.Duration {
	const n = 3_000
	r1, w1, err := os.Pipe()
	if err != nil {
		return 0
	}
	defer r1.Close()
	defer w1.Close()
	r2, w2, err := os.Pipe()
	if err != nil {
		return 0
	}
	defer r2.Close()
	defer w2.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		b := make([]byte, 1)
		for range n {
			if _, err := r1.Read(b); err != nil {
				return
			}
			if _, err := w2.Write(b); err != nil {
				return
			}
		}
	}()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b := make([]byte, 1)
	start := time.Now()
	for range n {
		if _, err := w1.Write(b); err != nil {
			return 0
		}
		if _, err := r2.Read(b); err != nil {
			return 0
		}
	}
	el := time.Since(start)
	<-done
	return el / (2 * n)
}

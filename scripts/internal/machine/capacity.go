package machine

import (
	"crypto/sha256"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"
)

// Capacity is what the host gave this machine while it was measured: how
// fast one core computes, how many cores' worth all of them computed at
// once, and what entering the kernel cost (a system call, a page fault, a
// switch between two threads). On a shared, paravirtualised host the
// figures move by themselves, and /proc/stat shows none of it as stolen
// time: on 2026-12-07 at 00:18 UTC this 2-core VM hashed on both cores
// at once 1.4–1.6 times as fast as on one, a minute later 2.0 times. And
// the machine the same name gets is not always the same: that day its
// vCPUs were an AMD EPYC's, where a system call took about 1 µs and a
// thread switch about 30 µs (each a trap to the host), and the DB-only
// ingest writer wrote 4,700–5,500 passports/s with its cores as busy as
// on the Intel Xeon of 2026-12-06, where it wrote 9,041. Runs of a
// benchmark are comparable only when their capacities are.
type Capacity struct {
	CPUs int
	// OneCore is the MB/s of SHA-256 hashed by one goroutine alone.
	OneCore float64
	// AllCores is the MB/s hashed by CPUs goroutines at once.
	AllCores float64
	// Syscall, PageFault and Switch are the medians of a cheap system call
	// (getppid), of a first touch of an anonymous page, and of half a
	// round trip of one byte between two threads over pipes; zero where
	// not measured (kernelCosts).
	Syscall, PageFault, Switch time.Duration
}

// Cores is how many of one core's work all CPUs did at once: CPUs on a
// host that gives each vCPU a core of its own, less on a busy one.
func (c Capacity) Cores() float64 {
	if c.OneCore <= 0 {
		return 0
	}
	return c.AllCores / c.OneCore
}

func (c Capacity) String() string {
	if c.OneCore <= 0 {
		return "unknown"
	}
	return fmt.Sprintf("one core %.0f MB/s of SHA-256, all %d at once %.2f cores' worth; system call %s, page fault %s, thread switch %s",
		c.OneCore, c.CPUs, c.Cores(), micros(c.Syscall), micros(c.PageFault), micros(c.Switch))
}

func micros(d time.Duration) string {
	if d <= 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f µs", float64(d)/float64(time.Microsecond))
}

// The hashing job of one goroutine in one measurement: a 1-MB buffer (in
// every CPU's cache) hashed 200 times, about an eighth of a second on a
// 2026 server core.
const (
	capacityBuf    = 1 << 20
	capacityRounds = 200
)

// MeasureCapacity times the hashing job on one goroutine, then on one
// goroutine per CPU at once, then the kernel's costs, rounds times each
// in turn, and returns the medians. It takes about rounds × 0.6 s, every
// CPU busy for part of it: measure between the phases of a benchmark, not
// inside one.
func MeasureCapacity(rounds int) Capacity {
	cpus := runtime.NumCPU()
	buf := make([]byte, capacityBuf)
	for i := range buf {
		buf[i] = byte(i)
	}
	var one, all []float64
	var sys, fault, sw []time.Duration
	for range max(rounds, 1) {
		one = append(one, hashRate(buf, 1))
		all = append(all, hashRate(buf, cpus))
		k := kernelCosts()
		sys, fault, sw = append(sys, k.syscall), append(fault, k.pageFault), append(sw, k.switchTime)
	}
	return Capacity{
		CPUs: cpus, OneCore: median(one), AllCores: median(all),
		Syscall: median(sys), PageFault: median(fault), Switch: median(sw),
	}
}

// hashRate is the MB/s hashed by n goroutines, each doing the job.
func hashRate(buf []byte, n int) float64 {
	var wg sync.WaitGroup
	start := time.Now()
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := sha256.New()
			for range capacityRounds {
				h.Write(buf)
			}
			_ = h.Sum(nil)
		}()
	}
	wg.Wait()
	mb := float64(n) * capacityRounds * capacityBuf / 1e6
	return mb / time.Since(start).Seconds()
}

type kernelCost struct {
	syscall, pageFault, switchTime time.Duration
}

func median[T int64 | float64 | time.Duration](xs []T) T {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

package main

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"time"
)

// The disk under a commit. Every ingest transaction waits for PostgreSQL's
// WAL flush (fsync on), so no commit is faster than this machine's disk
// makes an 8-kB write durable, and a latency run's tail can be the disk's
// own. The probe measures that during the run, on the filesystem of the
// cluster's data directory, as PostgreSQL writes its WAL: an 8-kB write
// into a file allocated and made durable beforehand (as a recycled WAL
// segment is), then fdatasync.

// diskProbeEvery spaces the probe's writes: 20 a second add a fifth to the
// ~110 commits a second of a latency run at 1,000 passports/s, and give
// 600 samples over a 30-s run.
const diskProbeEvery = 50 * time.Millisecond

// diskProbeFile is the size of the probe's file, written round in 8-kB
// blocks. It is allocated and synced before the run starts, so that its
// flush is not measured with the run.
const diskProbeFile = 1 << 20

// diskSamples are the probe's timings of one run.
type diskSamples struct {
	syncs   []time.Duration       // each write+fdatasync, sorted at stop
	slowest map[int]time.Duration // the worst per second since the start
	err     error                 // why the probe stopped early, if it did
}

type diskProbe struct {
	stopc chan struct{}
	done  chan diskSamples
}

// startDiskProbe allocates its file under dir, then writes and syncs 8 kB
// of it every diskProbeEvery until stop.
func startDiskProbe(dir string) *diskProbe {
	p := &diskProbe{stopc: make(chan struct{}), done: make(chan diskSamples, 1)}
	s := diskSamples{slowest: map[int]time.Duration{}}
	f, err := allocateProbeFile(dir)
	if err != nil {
		s.err = err
		go func() {
			<-p.stopc
			p.done <- s
		}()
		return p
	}
	go func() {
		defer func() {
			_ = f.Close()
			_ = os.Remove(f.Name())
			slices.Sort(s.syncs)
			p.done <- s
		}()
		block := make([]byte, 8<<10)
		start := time.Now()
		tick := time.NewTicker(diskProbeEvery)
		defer tick.Stop()
		for i := int64(0); ; i++ {
			select {
			case <-p.stopc:
				return
			case <-tick.C:
			}
			t := time.Now()
			copy(block, t.String()) // a changed block, as a WAL page is
			_, err := f.WriteAt(block, i*int64(len(block))%diskProbeFile)
			if err == nil {
				err = f.Sync() // fdatasync on Linux
			}
			if err != nil {
				s.err = fmt.Errorf("write and sync: %w", err)
				<-p.stopc
				return
			}
			d := time.Since(t)
			s.syncs = append(s.syncs, d)
			sec := int(t.Sub(start) / time.Second)
			s.slowest[sec] = max(s.slowest[sec], d)
		}
	}()
	return p
}

// allocateProbeFile creates the probe's file under dir, written in full
// and synced.
func allocateProbeFile(dir string) (*os.File, error) {
	f, err := os.CreateTemp(dir, "bench-disk-probe-*")
	if err != nil {
		return nil, fmt.Errorf("create the probe's file: %w", err)
	}
	if _, err = f.Write(make([]byte, diskProbeFile)); err == nil {
		err = f.Sync()
	}
	if err != nil {
		_ = f.Close()
		_ = os.Remove(f.Name())
		return nil, fmt.Errorf("allocate the probe's file: %w", err)
	}
	return f, nil
}

func (p *diskProbe) stop() diskSamples {
	close(p.stopc)
	return <-p.done
}

// slowSeconds lists the seconds whose worst sync took over limit, as
// "second:worst".
func (s diskSamples) slowSeconds(limit time.Duration, seconds int) string {
	var out []string
	for sec := 0; sec <= seconds; sec++ {
		if d := s.slowest[sec]; d > limit {
			out = append(out, fmt.Sprintf("%ds:%dms", sec, d.Milliseconds()))
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, " ")
}

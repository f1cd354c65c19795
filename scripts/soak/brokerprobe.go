package main

import (
	"context"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// brokerProbe times the broker itself, beside the load: a record of a few
// bytes produced every probeEvery to a topic of its own by a client of its
// own (no linger), each acknowledgement's wait going to the window it
// arrived in, as the outputs' latencies do. The dev broker (kfake) serves
// every request on one goroutine, so a pause there (its collector's mark, a
// long request) holds every client at once: the ingestor's fetches, the
// relay's produces, the load's own. The probe tells those windows from the
// service's own.
type brokerProbe struct {
	clock windowClock

	mu    sync.Mutex
	worst map[int]time.Duration // window → slowest acknowledgement in it
	sent  int64
	fails int64
}

// probeEvery is the probe's send interval: short enough that a pause of
// brokerStallMs holds at least two probe records.
const probeEvery = 20 * time.Millisecond

func newBrokerProbe(clock windowClock) *brokerProbe {
	return &brokerProbe{clock: clock, worst: map[int]time.Duration{}}
}

// run produces probe records through cl until ctx ends.
func (p *brokerProbe) run(ctx context.Context, cl *kgo.Client) {
	tick := time.NewTicker(probeEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case sentAt := <-tick.C:
			p.mu.Lock()
			p.sent++
			p.mu.Unlock()
			// Not ctx: a record in flight when the run ends is still
			// acknowledged, not aborted and counted as failed.
			cl.Produce(context.Background(), &kgo.Record{Value: []byte("probe")}, func(_ *kgo.Record, err error) {
				p.acked(time.Now(), sentAt, err)
			})
		}
	}
}

func (p *brokerProbe) acked(now, sentAt time.Time, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		p.fails++
		return
	}
	w := p.clock.window(now)
	if d := now.Sub(sentAt); d > p.worst[w] {
		p.worst[w] = d
	}
}

// worstMs is the slowest acknowledgement that arrived in window w, in ms
// (0 when none did).
func (p *brokerProbe) worstMs(w int) float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return float64(p.worst[w]) / float64(time.Millisecond)
}

// counts are the probe records sent and those that failed.
func (p *brokerProbe) counts() (sent, fails int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sent, p.fails
}

package testenv

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
)

// FaultProxy is a Toxiproxy proxy, embedded in the test binary, between the
// programs under test and one dependency (a PostgreSQL cluster, a broker): it
// listens on 127.0.0.1 and forwards every connection to the upstream
// address, and tests switch network faults on and off while traffic flows
// (latency, connection resets, a blackhole). Toxiproxy's server runs
// in-process, without its HTTP API: the test calls the proxy directly.
//
// Toxics act on connections that exist and on those opened while they are
// on. Turning a fault off removes it; connections that survived it carry on.
type FaultProxy struct {
	name  string
	proxy *toxiproxy.Proxy

	mu     sync.Mutex
	toxics map[string]bool // names of the toxics that are on
}

// NewFaultProxy starts a proxy named name (for messages) in front of
// upstream ("host:port") and stops it, closing every connection through it,
// at t's cleanup.
func NewFaultProxy(t testing.TB, name, upstream string) *FaultProxy {
	t.Helper()
	p, err := newFaultProxy(name, "127.0.0.1:0", upstream)
	if err != nil {
		t.Fatalf("testenv: fault proxy %s: %v", name, err)
	}
	t.Cleanup(p.close)
	return p
}

func newFaultProxy(name, listen, upstream string) (*FaultProxy, error) {
	// A server per proxy: nothing is shared between tests, and the
	// metrics registry it needs is a private one.
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	px := toxiproxy.NewProxy(srv, name, listen, upstream)
	if err := px.Start(); err != nil {
		return nil, fmt.Errorf("start proxy to %s: %w", upstream, err)
	}
	return &FaultProxy{name: name, proxy: px, toxics: map[string]bool{}}, nil
}

func (p *FaultProxy) close() { p.proxy.Stop() }

// Addr is where clients connect instead of the upstream ("127.0.0.1:port").
func (p *FaultProxy) Addr() string {
	p.proxy.Lock()
	defer p.proxy.Unlock()
	return p.proxy.Listen
}

// Upstream is the address the proxy forwards to.
func (p *FaultProxy) Upstream() string { return p.proxy.Upstream }

// Down closes the proxy's listener and every connection through it: a host
// that refuses connections at once (with a toxic on, Toxiproxy still
// accepts each one). [FaultProxy.Up] listens on the same address again.
func (p *FaultProxy) Down(t testing.TB) {
	t.Helper()
	p.proxy.Stop()
}

// Up undoes [FaultProxy.Down].
func (p *FaultProxy) Up(t testing.TB) {
	t.Helper()
	if err := p.proxy.Start(); err != nil {
		t.Fatalf("testenv: fault proxy %s: listen again: %v", p.name, err)
	}
}

// Toxic names used by the helpers below; one of each kind can be on.
const (
	toxicLatency   = "latency"
	toxicReset     = "reset"
	toxicBlackhole = "blackhole"
)

// Latency delays every chunk of data from the upstream (the direction that
// answers) by latency ± jitter. [FaultProxy.Clear] or
// [FaultProxy.Heal] with "latency" turns it off.
func (p *FaultProxy) Latency(t testing.TB, latency, jitter time.Duration) {
	t.Helper()
	p.add(t, toxicLatency, "latency", "downstream",
		fmt.Sprintf(`{"latency": %d, "jitter": %d}`, latency.Milliseconds(), jitter.Milliseconds()))
}

// ResetPeer makes every connection that carries data while it is on end
// with a TCP RST (SO_LINGER 0), at once, in both directions: what a
// restarted load balancer or a NAT that lost its state does. New connections
// are accepted and reset as soon as they carry data; call
// [FaultProxy.Heal] to stop.
func (p *FaultProxy) ResetPeer(t testing.TB) {
	t.Helper()
	p.add(t, toxicReset+"_up", "reset_peer", "upstream", `{"timeout": 0}`)
	p.add(t, toxicReset+"_down", "reset_peer", "downstream", `{"timeout": 0}`)
}

// Blackhole holds every byte in both directions without closing anything
// (Toxiproxy's timeout toxic with timeout 0): a half-open network, where a
// peer neither answers nor resets. New connections are accepted (the proxy
// answers the handshake) and hang the same way. Bytes sent meanwhile are
// dropped, so a connection that lived through a blackhole is usually
// unusable afterwards — like one whose peer was rebooted.
func (p *FaultProxy) Blackhole(t testing.TB) {
	t.Helper()
	p.add(t, toxicBlackhole+"_up", "timeout", "upstream", `{"timeout": 0}`)
	p.add(t, toxicBlackhole+"_down", "timeout", "downstream", `{"timeout": 0}`)
}

// Heal turns off the faults of one kind ("latency", "reset", "blackhole").
func (p *FaultProxy) Heal(t testing.TB, kind string) {
	t.Helper()
	p.mu.Lock()
	var names []string
	for n := range p.toxics {
		if n == kind || strings.HasPrefix(n, kind+"_") {
			names = append(names, n)
		}
	}
	p.mu.Unlock()
	for _, n := range names {
		p.remove(t, n)
	}
}

// Clear turns every fault off.
func (p *FaultProxy) Clear(t testing.TB) {
	t.Helper()
	p.mu.Lock()
	var names []string
	for n := range p.toxics {
		names = append(names, n)
	}
	p.mu.Unlock()
	for _, n := range names {
		p.remove(t, n)
	}
}

func (p *FaultProxy) add(t testing.TB, name, typ, stream, attrs string) {
	t.Helper()
	body := fmt.Sprintf(`{"name": %q, "type": %q, "stream": %q, "toxicity": 1.0, "attributes": %s}`, name, typ, stream, attrs)
	if _, err := p.proxy.Toxics.AddToxicJson(strings.NewReader(body)); err != nil {
		t.Fatalf("testenv: fault proxy %s: add %s toxic: %v", p.name, typ, err)
	}
	p.mu.Lock()
	p.toxics[name] = true
	p.mu.Unlock()
}

func (p *FaultProxy) remove(t testing.TB, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.proxy.Toxics.RemoveToxic(ctx, name); err != nil {
		t.Fatalf("testenv: fault proxy %s: remove toxic %s: %v", p.name, name, err)
	}
	p.mu.Lock()
	delete(p.toxics, name)
	p.mu.Unlock()
}

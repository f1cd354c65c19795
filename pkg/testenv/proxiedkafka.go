package testenv

import (
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

// ProxiedKafka is an in-process kfake broker of a test's own that every
// client reaches through a [FaultProxy]: kfake advertises its listener's
// address in metadata, and the listener handed to it reports the proxy's
// address, so clients that bootstrap from [ProxiedKafka.Addr] (the proxy)
// are told to connect to the proxy again for partitions and groups. A fault
// on the proxy therefore cuts every Kafka client off, the test's own too.
type ProxiedKafka struct {
	Proxy   *FaultProxy
	cluster *kfake.Cluster
}

// NewProxiedKafka starts the broker (one broker, topics auto-created with
// partitions partitions) and its proxy; both stop at t's cleanup.
func NewProxiedKafka(t testing.TB, partitions int) *ProxiedKafka {
	t.Helper()
	requireMain(t)
	start := time.Now()
	k := &ProxiedKafka{}
	var proxyErr error
	listen := func(network, address string) (net.Listener, error) {
		ln, err := net.Listen(network, address)
		if err != nil {
			return nil, err
		}
		px, err := newFaultProxy("kafka", "127.0.0.1:0", ln.Addr().String())
		if err != nil {
			ln.Close()
			proxyErr = err
			return nil, err
		}
		k.Proxy = px
		return &advertisedListener{Listener: ln, addr: px.Addr()}, nil
	}
	c, err := kfake.NewCluster(
		kfake.NumBrokers(1),
		kfake.ListenFn(listen),
		kfake.AllowAutoTopicCreation(),
		kfake.DefaultNumPartitions(partitions),
	)
	if err != nil {
		if k.Proxy != nil {
			k.Proxy.close()
		}
		t.Fatalf("testenv: proxied kfake: %v (proxy: %v)", err, proxyErr)
	}
	k.cluster = c
	// The broker first, then the proxy: a client must not reconnect
	// through a proxy whose upstream is gone.
	t.Cleanup(func() { c.Close(); k.Proxy.close() })
	t.Logf("testenv: kfake behind fault proxy %s (upstream %s) ready in %s", k.Proxy.Addr(), k.Proxy.Upstream(), time.Since(start).Round(time.Millisecond))
	return k
}

// Addr is the bootstrap address: the proxy.
func (k *ProxiedKafka) Addr() string { return k.Proxy.Addr() }

// advertisedListener accepts on the broker's real socket and reports the
// proxy's address, which kfake puts in its metadata answers.
type advertisedListener struct {
	net.Listener
	addr string
}

func (l *advertisedListener) Addr() net.Addr {
	a, err := net.ResolveTCPAddr("tcp", l.addr)
	if err != nil {
		return l.Listener.Addr()
	}
	return a
}

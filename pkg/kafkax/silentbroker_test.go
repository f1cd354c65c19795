package kafkax

import (
	"net"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// silentBroker listens on a local port, accepts connections, holds them
// open and never answers; requested is closed when a client has written
// its first bytes.
func silentBroker(t *testing.T) (port int, requested <-chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var (
		mu    sync.Mutex
		conns []net.Conn
		once  sync.Once
	)
	req := make(chan struct{})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go func() {
				if n, _ := c.Read(make([]byte, 1)); n > 0 {
					once.Do(func() { close(req) })
				}
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().(*net.TCPAddr).Port, req
}

package kafkax

import (
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestClientsDisableNagle checks the sockets librdkafka opens, not the
// configuration map: a property librdkafka ignored or renamed would pass a
// map check. The "broker" is a listener that accepts and never answers;
// every connection in this process whose peer is it is a client's.
func TestClientsDisableNagle(t *testing.T) {
	t.Parallel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	clients := map[string]func(bootstrap string) (close func(), err error){
		"producer": func(bootstrap string) (func(), error) {
			pr, err := NewProducer(quiet, ProducerConfig{ClientConfig: ClientConfig{BootstrapServers: bootstrap}})
			if err != nil {
				return nil, err
			}
			c, err := pr.client() // librdkafka connects to the bootstrap broker once created
			if err != nil {
				pr.Close(time.Second)
				return nil, err
			}
			c.release()
			return func() { pr.Close(time.Second) }, nil
		},
		"consumer": func(bootstrap string) (func(), error) {
			c, err := NewConsumer(quiet, ConsumerConfig{ClientConfig: ClientConfig{BootstrapServers: bootstrap}, GroupID: "g", Topic: "t"})
			if err != nil {
				return nil, err
			}
			return func() { _ = c.Close() }, nil
		},
	}
	for name, open := range clients {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			defer ln.Close()
			go func() {
				for {
					conn, err := ln.Accept()
					if err != nil {
						return
					}
					defer conn.Close()
				}
			}()
			closeClient, err := open(ln.Addr().String())
			require.NoError(t, err)
			defer closeClient()

			port := ln.Addr().(*net.TCPAddr).Port
			var fds []int
			require.Eventually(t, func() bool {
				fds = socketsTo(t, port)
				return len(fds) > 0
			}, 10*time.Second, 20*time.Millisecond, "the %s never connected to its bootstrap broker", name)
			for _, fd := range fds {
				v, err := syscall.GetsockoptInt(fd, syscall.IPPROTO_TCP, syscall.TCP_NODELAY)
				if err != nil {
					continue // closed meanwhile
				}
				require.Equal(t, 1, v, "TCP_NODELAY on the %s's connection (fd %d)", name, fd)
			}
		})
	}
}

// socketsTo returns this process's file descriptors of TCP connections
// whose peer is 127.0.0.1:port.
func socketsTo(t *testing.T, port int) []int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	var fds []int
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		sa, err := syscall.Getpeername(fd)
		if err != nil {
			continue // not a connected socket
		}
		if in, ok := sa.(*syscall.SockaddrInet4); ok && in.Port == port && in.Addr == [4]byte{127, 0, 0, 1} {
			fds = append(fds, fd)
		}
	}
	return fds
}

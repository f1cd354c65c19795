package kafkax

import (
	"io"
	"log/slog"
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
			port, requested := silentBroker(t)
			closeClient, err := open("127.0.0.1:" + strconv.Itoa(port))
			require.NoError(t, err)
			defer closeClient()

			// librdkafka sets its socket options once the connection is up
			// and only then writes its first request; a client reconnects
			// every 2 s (no answer), so a new socket may be caught before
			// its options are set: checked again until all are set.
			select {
			case <-requested:
			case <-time.After(10 * time.Second):
				t.Fatalf("the %s sent no request to its bootstrap broker", name)
			}
			checked, off := nagleSockets(port)
			for end := time.Now().Add(5 * time.Second); (checked == 0 || off > 0) && time.Now().Before(end); {
				time.Sleep(20 * time.Millisecond)
				checked, off = nagleSockets(port)
			}
			require.Positive(t, checked, "no connection of the %s found", name)
			require.Zero(t, off, "%d of the %s's %d connections without TCP_NODELAY", off, name, checked)
		})
	}
}

// nagleSockets checks this process's TCP connections to 127.0.0.1:port:
// how many it could check, and how many have TCP_NODELAY off. Each is
// checked on a duplicate of its descriptor, so that a descriptor closed
// and reused meanwhile is not taken for the connection.
func nagleSockets(port int) (checked, off int) {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0, 0
	}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		dup, err := syscall.Dup(fd)
		if err != nil {
			continue
		}
		sa, err := syscall.Getpeername(dup)
		in, ok := sa.(*syscall.SockaddrInet4)
		if err == nil && ok && in.Port == port && in.Addr == [4]byte{127, 0, 0, 1} {
			if v, err := syscall.GetsockoptInt(dup, syscall.IPPROTO_TCP, syscall.TCP_NODELAY); err == nil {
				checked++
				if v == 0 {
					off++
				}
			}
		}
		syscall.Close(dup)
	}
	return checked, off
}

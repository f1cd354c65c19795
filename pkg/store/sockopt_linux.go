package store

import (
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// setUserTimeout returns a dialer Control that sets TCP_USER_TIMEOUT on
// TCP sockets (see [TCPUserTimeout]); Unix sockets are left alone.
func setUserTimeout(d time.Duration) func(network, address string, c syscall.RawConn) error {
	return func(network, _ string, c syscall.RawConn) error {
		if network != "tcp" && network != "tcp4" && network != "tcp6" {
			return nil
		}
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(d.Milliseconds()))
		})
		if err != nil {
			return err
		}
		return serr
	}
}

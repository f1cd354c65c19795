//go:build !linux

package store

import (
	"syscall"
	"time"
)

// setUserTimeout is Linux-only (TCP_USER_TIMEOUT); elsewhere keepalive alone
// detects dead links.
func setUserTimeout(time.Duration) func(network, address string, c syscall.RawConn) error {
	return nil
}

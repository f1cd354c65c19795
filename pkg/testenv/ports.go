package testenv

import (
	"errors"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// freePort picks a TCP port on 127.0.0.1 that is free now and that this
// process has not handed out before (a stopped cluster keeps its port).
//
// It picks below the kernel's ephemeral range (ip_local_port_range), from
// which every outgoing connection takes its local port: a port from that
// range, free when picked, can be taken by any process's connection before
// the server meant for it binds it, or while a killed child is down (make
// test once lost a PostgreSQL start that way, "Address already in use").
// Where the range leaves too little room below it, it lets the kernel pick.
func freePort() (int, error) {
	usedPorts.mu.Lock()
	defer usedPorts.mu.Unlock()
	if lo, hi, ok := belowEphemeral(); ok {
		for range 100 {
			port := lo + rand.IntN(hi-lo)
			if usedPorts.m[port] || !bindable(port) {
				continue
			}
			usedPorts.m[port] = true
			return port, nil
		}
	}
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !usedPorts.m[port] {
			usedPorts.m[port] = true
			return port, nil
		}
	}
	return 0, errors.New("no free port")
}

var usedPorts = struct {
	mu sync.Mutex
	m  map[int]bool
}{m: map[int]bool{}}

// belowEphemeral is the range [lo, hi) that freePort picks from: from
// 10000 up to the start of the kernel's ephemeral range, when that leaves
// at least 4096 ports.
func belowEphemeral() (lo, hi int, ok bool) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, 0, false
	}
	fields := strings.Fields(string(b))
	if len(fields) != 2 {
		return 0, 0, false
	}
	start, err := strconv.Atoi(fields[0])
	if err != nil || start-10000 < 4096 {
		return 0, 0, false
	}
	return 10000, start, true
}

func bindable(port int) bool {
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

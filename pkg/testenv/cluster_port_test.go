package testenv

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// A cluster whose port was taken between freePort and the server's bind
// starts on another port instead of failing.
func TestStartOnFreePortMovesOffATakenPort(t *testing.T) {
	requireMain(t)
	bins, err := findPGBinaries()
	if err != nil {
		t.Fatalf("testenv: needs the PostgreSQL server binaries: %v; %s", err, installHint)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	taken := l.Addr().(*net.TCPAddr).Port

	c, err := newClusterDir(bins, "testenv-pgport-")
	if err != nil {
		t.Fatal(err)
	}
	defer c.destroy()
	if err := bins.initdbInto(c.dataDir); err != nil {
		t.Fatal(err)
	}
	c.port = taken
	if err := appendConf(filepath.Join(c.dataDir, "postgresql.conf"), map[string]string{
		"listen_addresses":        "'127.0.0.1'",
		"port":                    strconv.Itoa(taken),
		"unix_socket_directories": "'" + c.dir + "'",
	}); err != nil {
		t.Fatal(err)
	}
	if err := c.startOnFreePort(); err != nil {
		t.Fatalf("start with its port taken: %v", err)
	}
	if c.port == taken {
		t.Fatalf("still on the taken port %d", taken)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres", c.port))
	if err != nil {
		t.Fatalf("connect on the new port %d: %v", c.port, err)
	}
	conn.Close(ctx)
}

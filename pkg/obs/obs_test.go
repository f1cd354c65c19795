package obs

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

func TestEndpoints(t *testing.T) {
	t.Parallel()
	reg := NewRegistry()
	ready := NewReadiness(reg, "test")
	srv := httptest.NewServer(Handler(reg, ready))
	defer srv.Close()

	get := func(path string) (int, string) {
		resp, err := http.Get(srv.URL + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}

	code, _ := get("/healthz")
	require.Equal(t, 200, code)

	ready.Set("postgres", "connection refused")
	code, body := get("/readyz")
	require.Equal(t, 503, code)
	require.Contains(t, body, "postgres: connection refused")

	ready.Set("kafka", "broker 1 unreachable for 12s")
	code, body = get("/readyz")
	require.Equal(t, 503, code)
	require.Equal(t, "not ready: kafka: broker 1 unreachable for 12s; postgres: connection refused\n", body)

	ready.Set("postgres", "")
	ready.Set("kafka", "")
	code, _ = get("/readyz")
	require.Equal(t, 200, code)

	code, body = get("/metrics")
	require.Equal(t, 200, code)
	require.Contains(t, body, "go_goroutines")
	require.Contains(t, body, `test_ready{component="postgres"} 1`)
}

func TestJSONLogger(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	NewLogger(&buf, "json", slog.LevelInfo, false).Info("hello", "k", 1,
		"took", 1500*time.Millisecond, slog.Group("g", "outage", 2*time.Minute))
	var m map[string]any
	require.NoError(t, json.Unmarshal(buf.Bytes(), &m))
	require.Equal(t, "hello", m["msg"])
	require.Equal(t, float64(1), m["k"])
	require.Equal(t, "1.5s", m["took"], "durations as Go duration strings, not bare nanoseconds")
	require.Equal(t, map[string]any{"outage": "2m0s"}, m["g"])

	buf.Reset()
	NewLogger(&buf, "text", slog.LevelWarn, false).Info("hidden")
	require.Empty(t, buf.String())
	NewLogger(&buf, "text", slog.LevelInfo, false).Info("shown", "k", 1)
	require.True(t, strings.Contains(buf.String(), "shown"))
	require.NotContains(t, buf.String(), "\x1b[", "no colour into a buffer")

	buf.Reset()
	NewLogger(&buf, "text", slog.LevelInfo, true).Info("shown", "k", 1)
	require.Contains(t, buf.String(), "\x1b[", "colour when forced (FORCE_COLOR)")
}

// An idle keep-alive connection is closed by the server: one a client left
// open without a FIN would otherwise hold a goroutine for the process's life.
func TestServeClosesIdleConnections(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ln, err := Listen("127.0.0.1:0")
	require.NoError(t, err)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	const idle = 200 * time.Millisecond
	errc := serve(ctx, logger, ln, Handler(NewRegistry(), NewReadiness(NewRegistry(), "test")), idle)

	conn, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer conn.Close()
	// Before the request: the server's idle clock starts after its answer.
	start := time.Now()
	_, err = io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	require.NoError(t, err)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	_, err = io.Copy(io.Discard, resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, 200, resp.StatusCode)

	// The connection stays open (keep-alive) and idle; the server must
	// close it after idle, well before the read deadline.
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(10*idle)))
	_, err = br.ReadByte()
	require.ErrorIs(t, err, io.EOF, "the server did not close an idle connection within %s", 10*idle)
	require.GreaterOrEqual(t, time.Since(start), idle, "closed before it was idle")

	cancel()
	require.NoError(t, <-errc)
}

func TestIdent(t *testing.T) {
	t.Parallel()
	short := strings.Repeat("a", 128)
	if got := Ident(short); got != short {
		t.Errorf("Ident(128 bytes) = %q, want it whole", got)
	}
	long := strings.Repeat("é", 100) // 200 bytes; byte 128 is inside no rune
	got := Ident(long)
	if want := strings.Repeat("é", 64) + "…(200 bytes)"; got != want {
		t.Errorf("Ident(200 bytes) = %q, want %q", got, want)
	}
	odd := "x" + strings.Repeat("é", 100) // byte 128 splits a rune
	if got := Ident(odd); !utf8.ValidString(got) || !strings.HasSuffix(got, "…(201 bytes)") || len(got) > 128+len("…(201 bytes)") {
		t.Errorf("Ident(201 bytes, a rune split) = %q", got)
	}
}

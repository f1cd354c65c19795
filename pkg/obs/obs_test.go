package obs

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

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

	ready.Set("postgres", "")
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

package kafkax

import (
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/stretchr/testify/require"

	"github.com/pcp/route-processing/pkg/testenv"
)

func TestRepeatsAllowOncePerWindow(t *testing.T) {
	t.Parallel()
	var r repeats
	t0 := time.Unix(1000, 0)
	ok, held := r.allow("a", t0)
	require.True(t, ok)
	require.Zero(t, held)
	for i := 1; i <= 5; i++ {
		ok, _ := r.allow("a", t0.Add(time.Duration(i)*time.Second))
		require.False(t, ok, "a repeat within errEvery")
	}
	ok, _ = r.allow("b", t0.Add(time.Second))
	require.True(t, ok, "another key is not held back")
	ok, held = r.allow("a", t0.Add(errEvery))
	require.True(t, ok)
	require.Equal(t, 5, held, "the next line counts what was held back")

	for i := range maxKeys + 10 {
		r.allow(string(rune('A'+i)), t0)
	}
	require.LessOrEqual(t, len(r.seen), maxKeys, "the memory of keys is bounded")
}

// TestBridgeHoldsBackRepeats: librdkafka's lines that differ only in their
// numbers (a reconnect every second to a broker that refuses the
// credentials) are one line per errEvery, not one per reconnect.
func TestBridgeHoldsBackRepeats(t *testing.T) {
	t.Parallel()
	var buf testenv.SyncBuffer
	logger := slog.New(slog.NewTextHandler(&buf, nil))
	m := kafka.ConfigMap{}
	stop := bridgeLogs(logger, m, "consumer")
	ch := m["go.logs.channel"].(chan kafka.LogEvent)
	for i := range 20 {
		ch <- kafka.LogEvent{Level: 3, Tag: "FAIL", Message: "sasl.example:9093/1: SASL authentication error: Authentication failed (after " + strconv.Itoa(i*7) + "ms in state AUTH_REQ)"}
		ch <- kafka.LogEvent{Level: 3, Tag: "ERROR", Message: "1/1 brokers are down"}
	}
	stop()
	require.Eventually(t, func() bool { return strings.Count(buf.String(), "\n") >= 2 }, 5*time.Second, 10*time.Millisecond)
	time.Sleep(100 * time.Millisecond) // anything else the bridge would write
	require.Equal(t, 2, strings.Count(buf.String(), "\n"), buf.String())
}

// TestBridgeHintsAtTheSetupBound: a connection setup that timed out is
// logged with what to change and the bound in effect, since over a link
// slower than it no connection is ever made.
func TestBridgeHintsAtTheSetupBound(t *testing.T) {
	t.Parallel()
	var buf testenv.SyncBuffer
	logger := slog.New(slog.NewTextHandler(&buf, nil))
	m := kafka.ConfigMap{"socket.connection.setup.timeout.ms": 7000}
	stop := bridgeLogs(logger, m, "producer")
	ch := m["go.logs.channel"].(chan kafka.LogEvent)
	ch <- kafka.LogEvent{Level: 4, Tag: "FAIL", Message: "broker:9092/bootstrap: Connection setup timed out in state APIVERSION_QUERY (after 7001ms in state APIVERSION_QUERY)"}
	ch <- kafka.LogEvent{Level: 3, Tag: "ERROR", Message: "1/1 brokers are down"}
	stop()
	require.Eventually(t, func() bool { return strings.Count(buf.String(), "\n") >= 2 }, 5*time.Second, 10*time.Millisecond)
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Contains(t, lines[0], "7000 ms here")
	require.Contains(t, lines[0], "KAFKA_PROPERTY_SOCKET_CONNECTION_SETUP_TIMEOUT_MS")
	require.NotContains(t, lines[1], "hint=", "only the setup timeout carries the hint")
}

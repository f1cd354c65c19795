package kafkax

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// bridgeLogs forwards librdkafka's log lines into slog through a channel
// that it puts into the configuration. confluent-kafka-go never closes a
// channel it was given, so the caller calls the returned stop after the
// client's Close; until then the forwarding goroutine runs.
func bridgeLogs(logger *slog.Logger, m kafka.ConfigMap, client string) (stop func()) {
	ch := make(chan kafka.LogEvent, 256)
	m["go.logs.channel.enable"] = true
	m["go.logs.channel"] = ch
	setupBound := m["socket.connection.setup.timeout.ms"]
	go func() {
		var rep repeats
		for e := range ch {
			ok, held := rep.allow(messageKey(e.Tag, e.Message), time.Now())
			if !ok {
				continue
			}
			attrs := []any{"client", client, "tag", e.Tag, "name", e.Name}
			if held > 0 {
				attrs = append(attrs, "repeated", held)
			}
			if strings.Contains(e.Message, "Connection setup timed out") {
				// Over a link slower than the bound no connection is ever
				// made; the line alone does not say what to change.
				attrs = append(attrs, "hint", fmt.Sprintf("a broker connection must be set up (TCP, TLS, SASL, ApiVersion) within socket.connection.setup.timeout.ms, %v ms here; if the brokers are up and the link is slow, raise it with KAFKA_PROPERTY_SOCKET_CONNECTION_SETUP_TIMEOUT_MS", setupBound))
			}
			// syslog levels: 0-3 error, 4 warning, 5-6 info, 7 debug.
			lvl := slog.LevelDebug
			switch {
			case e.Level <= 3:
				lvl = slog.LevelError
			case e.Level == 4:
				lvl = slog.LevelWarn
			case e.Level <= 6:
				lvl = slog.LevelInfo
			}
			logger.Log(context.Background(), lvl, "librdkafka: "+strings.TrimSpace(e.Message), attrs...)
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(ch) }) }
}

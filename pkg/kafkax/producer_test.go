package kafkax

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/stretchr/testify/require"

	"github.com/pcp/route-processing/pkg/record"
)

func TestErrorClasses(t *testing.T) {
	t.Parallel()
	type class int
	const (
		message class = iota
		unavailable
		notAttempted
	)
	cases := []struct {
		err  error
		want class
	}{
		// The cluster's fault: never charged, even while a broker answers.
		{kafka.NewError(kafka.ErrMsgTimedOut, "Local: Message timed out", false), unavailable},
		{kafka.NewError(kafka.ErrNotEnoughReplicas, "", false), unavailable},
		{kafka.NewError(kafka.ErrNotEnoughReplicasAfterAppend, "", false), unavailable},
		{kafka.NewError(kafka.ErrLeaderNotAvailable, "", false), unavailable},
		{kafka.NewError(kafka.ErrNotLeaderForPartition, "", false), unavailable},
		{kafka.NewError(kafka.ErrTransport, "", false), unavailable},
		{kafka.NewError(kafka.ErrAllBrokersDown, "", false), unavailable},
		{kafka.NewError(kafka.ErrRequestTimedOut, "", false), unavailable},
		{fmt.Errorf("no delivery report within 30s: %w", errTimeout), unavailable},
		// Never judged: the client dropped it.
		{kafka.NewError(kafka.ErrPurgeQueue, "", false), notAttempted},
		{kafka.NewError(kafka.ErrPurgeInflight, "", false), notAttempted},
		{kafka.NewError(kafka.ErrDestroy, "", false), notAttempted},
		{kafka.NewError(kafka.ErrFatal, "", false), notAttempted},
		{kafka.NewError(kafka.ErrOutOfOrderSequenceNumber, "", true), notAttempted}, // fatal flag
		{kafka.NewError(kafka.ErrState, "Operation not allowed on closed client", false), notAttempted},
		{fmt.Errorf("produce: %w", errClosed), notAttempted},
		// The message's fault: charged.
		{kafka.NewError(kafka.ErrMsgSizeTooLarge, "", false), message},
		{kafka.NewError(kafka.ErrTopicAuthorizationFailed, "", false), message},
		{kafka.NewError(kafka.ErrTopicException, "", false), message},
		{kafka.NewError(kafka.ErrInvalidMsg, "", false), message},
		{kafka.NewError(kafka.ErrUnknownTopicOrPart, "", false), message},
		{kafka.NewError(kafka.ErrUnknownTopic, "", false), message},
		{errors.New("something else"), message},
	}
	for _, c := range cases {
		got := message
		switch {
		case isNotAttempted(c.err):
			got = notAttempted
			require.False(t, isUnavailable(c.err), "%v is both", c.err)
		case isUnavailable(c.err):
			got = unavailable
		}
		require.Equal(t, c.want, got, "%v", c.err)
	}
}

// TestResetWaitsForCallsInFlight: a client dropped after a fatal error is
// closed only once every ProduceBatch using it has returned; those calls
// never see a closed client, and the next call gets a new client.
func TestResetWaitsForCallsInFlight(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0") // accepts, never answers
	require.NoError(t, err)
	defer ln.Close()
	pr, err := NewProducer(slog.New(slog.NewTextHandler(io.Discard, nil)), ProducerConfig{
		ClientConfig:    ClientConfig{BootstrapServers: ln.Addr().String()},
		DeliveryTimeout: 30 * time.Second,
	})
	require.NoError(t, err)
	defer pr.Close(time.Second)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	old, err := pr.client()
	require.NoError(t, err)
	old.release()
	done := make(chan []error, 1)
	go func() { done <- pr.ProduceBatch(ctx, []record.Record{{Topic: "t", Value: []byte("v")}}) }()
	time.Sleep(300 * time.Millisecond) // the call is waiting for its report

	pr.reset(old, kafka.NewError(kafka.ErrFatal, "test: fatal", true))
	time.Sleep(300 * time.Millisecond)
	require.False(t, old.p.IsClosed(), "closed under a call in flight")
	select {
	case errs := <-done:
		t.Fatalf("the call returned early: %v", errs)
	default:
	}

	next, err := pr.client()
	require.NoError(t, err)
	require.NotSame(t, old, next, "a new client for new calls")
	next.release()

	cancel()
	errs := <-done
	require.ErrorIs(t, errs[0], context.Canceled, "the call ended on its own terms, not on a closed client")
	require.ErrorIs(t, errs[0], record.ErrNotAttempted, "a cancelled call judged nothing")
	require.Eventually(t, old.p.IsClosed, 10*time.Second, 10*time.Millisecond, "closed once the call returned")
}

func TestClosedProducerIsNotAttempted(t *testing.T) {
	t.Parallel()
	pr, err := NewProducer(slog.New(slog.NewTextHandler(io.Discard, nil)), ProducerConfig{
		ClientConfig: ClientConfig{BootstrapServers: "127.0.0.1:1"},
	})
	require.NoError(t, err)
	pr.Close(100 * time.Millisecond)
	errs := pr.ProduceBatch(context.Background(), []record.Record{{Topic: "t", Value: []byte("v")}})
	require.ErrorIs(t, errs[0], errClosed)
	require.True(t, isNotAttempted(errs[0]))
	require.ErrorIs(t, errs[0], record.ErrNotAttempted, "wrapped for callers without the client library")
}

// TestCreateRefusesBadPropertiesAsSettingErrors: a client librdkafka will
// not create from the operator's properties fails with a *PropertyError
// (a deployment error: the mains exit 2) that names the property family
// and never a value.
func TestCreateRefusesBadPropertiesAsSettingErrors(t *testing.T) {
	t.Parallel()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	cc := ClientConfig{BootstrapServers: "127.0.0.1:1", Properties: map[string]string{"bogus.prop": "S3CRETVALUE"}}
	_, perr := NewProducer(logger, ProducerConfig{ClientConfig: cc})
	_, cerr := NewConsumer(logger, ConsumerConfig{ClientConfig: cc, GroupID: "g", Topic: "t"})
	_, rerr := NewReader(logger, ReaderConfig{ClientConfig: cc})
	for _, err := range []error{perr, cerr, rerr} {
		var pe *PropertyError
		require.ErrorAs(t, err, &pe)
		require.Equal(t, "KAFKA_*PROPERTY_*", pe.Setting())
		require.Contains(t, err.Error(), "bogus.prop")
		require.Contains(t, err.Error(), "KAFKA_PROPERTY_*")
		require.NotContains(t, err.Error(), "S3CRETVALUE")
		require.NotContains(t, err.Error(), "\n", "one line")
	}
}

// A refusal whose message names no property ("Unsupported SASL
// mechanism") is still a setting error, and, told the variables that
// reached the client, names them as candidates rather than as the setter.
func TestARefusalNamingNoPropertyListsTheVariables(t *testing.T) {
	t.Parallel()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	cc := ClientConfig{BootstrapServers: "127.0.0.1:1", Properties: map[string]string{
		"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "BOGUS"}}
	_, err := NewProducer(logger, ProducerConfig{ClientConfig: cc})
	var pe *PropertyError
	require.ErrorAs(t, err, &pe)
	require.Empty(t, pe.PropertyNames(), "librdkafka's message: %v", err)
	pe.SetVariables("KAFKA_PROPERTY_SASL_MECHANISMS", "KAFKA_PROPERTY_SECURITY_PROTOCOL")
	require.Contains(t, err.Error(), "librdkafka names no property; the variables that reached it: KAFKA_PROPERTY_SASL_MECHANISMS, KAFKA_PROPERTY_SECURITY_PROTOCOL")
	require.NotContains(t, err.Error(), "set by")
}

package kafkax

import (
	"errors"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

var (
	// ErrTimeout: no answer in time; the cluster may be unreachable.
	ErrTimeout = errors.New("kafka: timed out")
	// ErrUnavailable: no broker answers.
	ErrUnavailable = errors.New("kafka: unavailable")
)

// IsUnavailable reports whether err says the cluster could not be reached
// (as opposed to the cluster refusing this message). Retrying such an error
// is the cluster's problem, not the message's: callers must not count it
// against the message.
func IsUnavailable(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, ErrTimeout) || errors.Is(err, ErrUnavailable) {
		return true
	}
	var kerr kafka.Error
	if !errors.As(err, &kerr) {
		return false
	}
	switch kerr.Code() {
	case kafka.ErrAllBrokersDown, kafka.ErrTransport, kafka.ErrMsgTimedOut,
		kafka.ErrTimedOut, kafka.ErrTimedOutQueue, kafka.ErrRequestTimedOut,
		kafka.ErrNetworkException, kafka.ErrBrokerNotAvailable,
		kafka.ErrLeaderNotAvailable, kafka.ErrNotLeaderForPartition,
		kafka.ErrNotEnoughReplicas, kafka.ErrNotEnoughReplicasAfterAppend,
		kafka.ErrNotCoordinator, kafka.ErrCoordinatorNotAvailable,
		kafka.ErrResolve, kafka.ErrDestroy, kafka.ErrFatal,
		kafka.ErrPurgeQueue, kafka.ErrPurgeInflight:
		return true
	}
	return kerr.IsRetriable() || kerr.IsTimeout()
}

func isFatal(err error) bool {
	var kerr kafka.Error
	// Messages failed by a client in the fatal state carry ERR__FATAL,
	// not always the IsFatal flag of the underlying error.
	return errors.As(err, &kerr) && (kerr.IsFatal() || kerr.Code() == kafka.ErrFatal)
}

// IsFatal reports whether err is a fatal producer error: the idempotence
// guarantee was broken and the client must be replaced (ProduceBatch does so
// by itself). The message was not refused for what it is; retry it on the
// new client without counting it against the message.
func IsFatal(err error) bool { return isFatal(err) }

// IsMessageTooLarge reports whether err says the message exceeds a size
// limit, of the client (message.max.bytes) or of the topic.
func IsMessageTooLarge(err error) bool {
	var kerr kafka.Error
	return errors.As(err, &kerr) && kerr.Code() == kafka.ErrMsgSizeTooLarge
}

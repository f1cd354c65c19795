package kafkax

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/pcp/route-processing/pkg/record"
)

// Causes this package gives its errors. Callers outside it branch on the
// record sentinels instead: classify wraps record.ErrNotAttempted or
// record.ErrUnavailable around produce errors, and Probe wraps
// record.ErrUnavailable when the answer lists no broker.
var (
	// errTimeout: no answer in time; the cluster may be unreachable.
	errTimeout = errors.New("kafka: timed out")
	// errClosed: the producer was closed; nothing was sent.
	errClosed = errors.New("kafka: producer closed")
)

// Three classes of produce errors, so that a caller that counts attempts
// against a message (the outbox relay) charges only what is the message's
// fault:
//
//   - not attempted (isNotAttempted): the message was never judged by the
//     cluster — the producer was closed, reset after a fatal error, or
//     purged its queues. Send it again, count nothing.
//   - unavailable (isUnavailable): the cluster could not take it — no
//     broker reachable, transport errors, timeouts, a partition without a
//     leader (broker down, election), not enough in-sync replicas. Send it
//     again later, count nothing, whether or not some broker still answers.
//   - anything else is the message's fault and counts: too large, not
//     authorised, invalid or unknown topic (a topic that does not exist is
//     a wrong row or a missing deployment step; counting makes it FAILED and
//     visible in `outbox-relay stats` instead of retried unseen forever),
//     corrupt or invalid record, policy violations, and errors not listed.

// unavailableCodes are the cluster's problems.
var unavailableCodes = map[kafka.ErrorCode]bool{
	kafka.ErrAllBrokersDown:               true,
	kafka.ErrTransport:                    true,
	kafka.ErrMsgTimedOut:                  true,
	kafka.ErrTimedOut:                     true,
	kafka.ErrTimedOutQueue:                true,
	kafka.ErrRequestTimedOut:              true,
	kafka.ErrNetworkException:             true,
	kafka.ErrBrokerNotAvailable:           true,
	kafka.ErrLeaderNotAvailable:           true,
	kafka.ErrNotLeaderForPartition:        true,
	kafka.ErrNotEnoughReplicas:            true,
	kafka.ErrNotEnoughReplicasAfterAppend: true,
	kafka.ErrKafkaStorageError:            true,
	kafka.ErrFencedLeaderEpoch:            true,
	kafka.ErrUnknownLeaderEpoch:           true,
	kafka.ErrNotCoordinator:               true,
	kafka.ErrCoordinatorNotAvailable:      true,
	kafka.ErrResolve:                      true,
	kafka.ErrWaitCoord:                    true,
}

// messageCodes are the message's problems, even where librdkafka flags
// them retriable.
var messageCodes = map[kafka.ErrorCode]bool{
	kafka.ErrUnknownTopicOrPart: true,
	kafka.ErrUnknownTopic:       true,
	kafka.ErrUnknownPartition:   true,
}

// producerStateCodes are the broker's answers to a request whose
// producer's idempotence state broke (librdkafka turns the client fatal on
// them): they say nothing of the request's records.
var producerStateCodes = map[kafka.ErrorCode]bool{
	kafka.ErrOutOfOrderSequenceNumber:   true,
	kafka.ErrDuplicateSequenceNumber:    true,
	kafka.ErrInvalidProducerEpoch:       true,
	kafka.ErrUnknownProducerID:          true,
	kafka.ErrInvalidProducerIDMapping:   true,
	kafka.ErrProducerFenced:             true,
	kafka.ErrClusterAuthorizationFailed: true,
}

// producerStateError reports whether err is one of producerStateCodes.
func producerStateError(err error) bool {
	var kerr kafka.Error
	return errors.As(err, &kerr) && producerStateCodes[kerr.Code()]
}

// notAttemptedCodes: the message was dropped by the client, not judged.
var notAttemptedCodes = map[kafka.ErrorCode]bool{
	kafka.ErrPurgeQueue:    true,
	kafka.ErrPurgeInflight: true,
	kafka.ErrDestroy:       true,
	kafka.ErrFatal:         true,
	// A closed client answers every call with ErrState.
	kafka.ErrState: true,
}

// isNotAttempted reports whether err says the message was not judged by the
// cluster at all: the producer was closed (errClosed, ErrState), reset after
// a fatal error (ErrFatal, see isFatal), destroyed, or purged its queue or
// in-flight requests. Retry it without counting it against the message.
func isNotAttempted(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, errClosed) || isFatal(err) {
		return true
	}
	var kerr kafka.Error
	return errors.As(err, &kerr) && notAttemptedCodes[kerr.Code()]
}

// isUnavailable reports whether err says the cluster could not take the
// message (as opposed to refusing this message): unreachable brokers,
// timeouts, no partition leader, not enough in-sync replicas. Retrying it is
// the cluster's problem, not the message's: callers must not count it
// against the message, even when some broker still answers.
func isUnavailable(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, errTimeout) || errors.Is(err, record.ErrUnavailable) {
		return true
	}
	var kerr kafka.Error
	if !errors.As(err, &kerr) {
		return false
	}
	switch c := kerr.Code(); {
	case unavailableCodes[c]:
		return true
	case messageCodes[c], notAttemptedCodes[c]:
		return false
	}
	return kerr.IsRetriable() || kerr.IsTimeout()
}

// isFatal reports whether err is a fatal producer error: the idempotence
// guarantee was broken and the client must be replaced (ProduceBatch does so
// by itself). The message was not refused for what it is; retry it on the
// new client without counting it against the message.
func isFatal(err error) bool {
	var kerr kafka.Error
	// Messages failed by a client in the fatal state carry ERR__FATAL,
	// not always the IsFatal flag of the underlying error.
	return errors.As(err, &kerr) && (kerr.IsFatal() || kerr.Code() == kafka.ErrFatal)
}

// TooLarge reports whether err, from ProduceBatch, says the record exceeds a
// size limit of the client (message.max.bytes) or of the topic. With it
// *Producer satisfies the dead-letter interface of package ingest, which
// owns what to do then.
func (*Producer) TooLarge(err error) bool {
	var kerr kafka.Error
	return errors.As(err, &kerr) && kerr.Code() == kafka.ErrMsgSizeTooLarge
}

// classify wraps a produce error with the record sentinel that says whose
// fault it is: record.ErrNotAttempted (never judged: producer reset, closed
// or purged, or ctx ended first), record.ErrUnavailable (the cluster's
// fault), or nothing (the message's fault).
func classify(ctx context.Context, err error) error {
	switch {
	case err == nil:
		return nil
	case isNotAttempted(err):
		return fmt.Errorf("%w: %w", record.ErrNotAttempted, err)
	case ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)):
		return fmt.Errorf("%w: %w", record.ErrNotAttempted, err)
	case isUnavailable(err):
		return fmt.Errorf("%w: %w", record.ErrUnavailable, err)
	}
	return err
}

// PropertyError is a client that librdkafka refused to create because of
// its configuration: an unknown property, a value out of range, settings
// that contradict each other. Only the operator's KAFKA_*PROPERTY_*
// variables (or the service's own settings behind them) can cause it, so
// it is a deployment error: Setting makes the mains exit with status 2.
type PropertyError struct {
	// Client is what was being created: "kafka producer", "kafka consumer".
	Client string
	Err    error
	// names are the names of the property librdkafka's message names
	// (its own, and the aliases that set the same property), none when it
	// names none.
	names []string
	// variables are the environment variables that set it, when the
	// caller found them (SetVariables).
	variables []string
}

func (e *PropertyError) Error() string {
	// librdkafka's message ends with a newline: the process's one line.
	where := "check the KAFKA_PROPERTY_*, KAFKA_CONSUMER_PROPERTY_* and KAFKA_PRODUCER_PROPERTY_* variables"
	switch {
	case len(e.variables) > 0 && len(e.names) > 0:
		where = "set by " + strings.Join(e.variables, ", ")
	case len(e.variables) > 0:
		where = "librdkafka names no property; the variables that reached it: " + strings.Join(e.variables, ", ")
	}
	return fmt.Sprintf("create %s: %s (%s)", e.Client, strings.TrimSpace(e.Err.Error()), where)
}

func (e *PropertyError) Unwrap() error { return e.Err }

// Setting names the variables behind the error.
func (e *PropertyError) Setting() string {
	if len(e.variables) > 0 {
		return strings.Join(e.variables, ", ")
	}
	return "KAFKA_*PROPERTY_*"
}

// PropertyNames returns the names under which the refused property can be
// set (librdkafka's, and its aliases), none when the message names none.
func (e *PropertyError) PropertyNames() []string { return e.names }

// SetVariables records the environment variables that set the property
// (every one that reached the client when the message names no property),
// for the message: this package knows properties, not the variables an
// operator sets them with.
func (e *PropertyError) SetVariables(names ...string) { e.variables = names }

// createError wraps the error of creating client.
func createError(client string, err error) error {
	var ke kafka.Error
	if errors.As(err, &ke) && ke.Code() == kafka.ErrInvalidArg {
		return &PropertyError{Client: client, Err: err, names: namedProperty(ke.Error())}
	}
	return fmt.Errorf("create %s: %w", client, err)
}

// namedProperty finds the property librdkafka's refusal names: the quoted
// name after "property" (`Configuration property "linger.ms" value …`, `No
// such configuration property: "foo.bar"`, `Invalid value "x" for
// configuration property "debug"`), else the first quoted one, else a
// leading name (`ssl.key.location failed: …`). It returns that name, the
// name configMap keeps it under and every alias of it; none when the
// message names no property.
func namedProperty(msg string) []string {
	var name string
	quoted := msg
	// `Invalid value "x" for configuration property "p"`: the value is
	// quoted first.
	for _, marker := range []string{`property "`, `property: "`} {
		if _, rest, ok := strings.Cut(msg, marker); ok {
			quoted = `"` + rest
			break
		}
	}
	if _, rest, ok := strings.Cut(quoted, `"`); ok {
		name, _, _ = strings.Cut(rest, `"`)
	} else if first, _, ok := strings.Cut(msg, " "); ok && strings.Contains(first, ".") {
		name = first
	}
	if name == "" || strings.ContainsAny(name, " :") {
		return nil
	}
	canonical := canonicalProperty(name)
	names := []string{canonical}
	if name != canonical {
		names = append(names, name)
	}
	for alias, to := range propertyAliases {
		if to == canonical && alias != name {
			names = append(names, alias)
		}
	}
	slices.Sort(names)
	return names
}

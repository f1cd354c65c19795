package record

import (
	"errors"
	"fmt"
)

// Sentinels a producer wraps into its per-record errors so that callers can
// tell the cluster's faults from the record's without importing the client
// library. An error wrapping neither is the record's own fault (too large,
// unknown topic, not authorised): a caller that counts attempts counts it.
var (
	// ErrUnavailable: the cluster could not take the record for reasons of
	// its own: no broker reachable, a partition without a leader, not
	// enough in-sync replicas, timeouts. Send it again later; it is not the
	// record's fault. A probe whose answer lists no broker wraps it too (a
	// probe that times out returns the client's error; nothing branches on
	// the difference).
	ErrUnavailable = errors.New("kafka unavailable")
	// ErrNotAttempted: the record was never judged by the cluster (the
	// producer was closed, reset after a fatal error or purged its queues,
	// or the caller's context ended first). Send it again; count nothing.
	ErrNotAttempted = errors.New("publish not attempted")
	// ErrClientUnusable: the local client cannot be used for now, whatever
	// the brokers answer (a producer waiting before it is built again
	// after fatal errors that outlive clients). A probe returns it too, so
	// that readiness names the client's cause rather than the brokers.
	ErrClientUnusable = errors.New("kafka client unusable")
)

// TopicError says that the brokers answered but cannot serve topic: any
// error of the topic's own in their answer (unknown, not authorised, a
// topic still being created). A partition without a leader is not one. A
// probe returns it, so that readiness names the topic rather than the
// brokers.
type TopicError struct {
	Topic string
	Err   error
}

func (e *TopicError) Error() string { return fmt.Sprintf("topic %s: %v", e.Topic, e.Err) }

func (e *TopicError) Unwrap() error { return e.Err }

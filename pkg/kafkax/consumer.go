package kafkax

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/pcp/route-processing/pkg/record"
)

// assignmentStrategy is the partition.assignment.strategy of the consumer.
// cooperative-sticky moves only the partitions that must move when a member
// joins or leaves, so the other members keep writing through a rebalance
// instead of stopping and draining everything (eager "range" revokes the
// whole assignment of every member on each rebalance).
const assignmentStrategy = "cooperative-sticky"

// SessionTimeout is the consumer's default session.timeout.ms (see
// NewConsumer for why 10 s). It also bounds how long the group may hold a
// rejoining member after a broker outage longer than the session: the
// coordinator can renew the lapsed membership from a heartbeat sent before
// the outage and then waits for it to expire again.
const SessionTimeout = 10 * time.Second

// ConsumerConfig configures a group consumer of one topic.
type ConsumerConfig struct {
	ClientConfig
	// GroupID is the consumer group (KAFKA_CONSUMER_GROUP).
	GroupID string
	// Topic is the one topic consumed.
	Topic string
}

// Consumer is a group consumer with manual offset management: nothing is
// committed or stored behind the caller's back.
type Consumer struct {
	logger *slog.Logger
	topic  string
	c      *kafka.Consumer
	// stopLogs ends the log bridge once the client is closed.
	stopLogs func()

	// librdkafka repeats a transport error many times a second while a
	// broker is down; each code is logged once every errEvery.
	errs repeats
	// health reads librdkafka's statistics (LinkProblem).
	health *linkHealth
	// rebalanceErr is an assignment change the rebalance callback could
	// not make; the callback runs inside Poll, which returns it.
	rebalanceErr error

	// A paused partition gets no fetch responses, so librdkafka's cached
	// high watermark stops moving (a backlog built during an outage would
	// not show in the lag); HighWatermark asks the broker for those.
	wmMu   sync.Mutex
	paused map[int32]time.Time // since when
	asked  map[int32]askedWatermark
}

type askedWatermark struct {
	high int64
	at   time.Time
}

// Once a partition has been paused for askWatermarkEvery (an outage, not
// the moment's back-pressure of a backlog), its high watermark is asked of
// the broker at most every askWatermarkEvery, each request bounded by
// askWatermarkTimeout (HighWatermark runs on the poll loop).
const (
	askWatermarkEvery   = 5 * time.Second
	askWatermarkTimeout = 500 * time.Millisecond
)

// consumerEnforced are the settings the at-least-once guarantee rests on:
// offsets move only through Commit.
func consumerEnforced(cfg ConsumerConfig) kafka.ConfigMap {
	return kafka.ConfigMap{
		"group.id":                      cfg.GroupID,
		"enable.auto.commit":            false,
		"enable.auto.offset.store":      false,
		"partition.assignment.strategy": assignmentStrategy,
		"go.events.channel.enable":      false,
		"enable.partition.eof":          false,
		// Rebalances go to the callback that Subscribe passes to
		// SubscribeTopics (called from inside Poll), which assigns and
		// unassigns; none is handed to the caller as an event.
		"go.application.rebalance.enable": false,
	}
}

// brokerAssigned reports whether the operator's properties choose the
// consumer group protocol of KIP-848 (group.protocol=consumer), in which
// the brokers assign partitions, over the classic one.
func brokerAssigned(props map[string]string) bool {
	for k, v := range props {
		if canonicalProperty(k) == "group.protocol" {
			return strings.EqualFold(strings.TrimSpace(v), "consumer")
		}
	}
	return false
}

// NewConsumer creates the consumer. It does not wait for the brokers:
// librdkafka starts connecting to them in the background.
func NewConsumer(logger *slog.Logger, cfg ConsumerConfig) (*Consumer, error) {
	if cfg.GroupID == "" || cfg.Topic == "" {
		return nil, errors.New("kafka consumer: group and topic are required")
	}
	defaults := kafka.ConfigMap{
		"auto.offset.reset":       "earliest",
		"socket.keepalive.enable": true,
		// Polled records wait in memory while the database is down, so the
		// prefetch queue need not be large.
		"queued.max.messages.kbytes": 16384,
		// With the queue over that bound (a backlog, or partitions resumed
		// after an outage) librdkafka postpones the partition's next fetch
		// by this much, 1 s by default: measured in pkg/e2e
		// pg-outage-recovery, 1.3 s from resuming to the first batch
		// written, 0.8 s at 50 ms. A check every 50 ms costs nothing.
		"fetch.queue.backoff.ms": 50,
		// A member that dies without leaving the group (SIGKILL, OOM kill,
		// a lost node) keeps its partitions until its session expires: the
		// input of those partitions stalls that long. librdkafka's 45 s
		// (Kafka's since 3.0, against spurious rebalances of JVM clients in
		// long GC pauses) measured 46 s in pkg/e2e ingestor-takeover; Go's
		// collector pauses for microseconds and librdkafka heartbeats from
		// a thread of its own (every 3 s), so 10 s, Kafka's earlier default.
		"session.timeout.ms": int(SessionTimeout.Milliseconds()),
		// For LinkProblem (linkhealth.go).
		"statistics.interval.ms": int(statsInterval.Milliseconds()),
	}
	enforced := consumerEnforced(cfg)
	if brokerAssigned(cfg.Properties) {
		// The brokers assign the partitions (group.remote.assignor) and
		// keep the session timeout: librdkafka refuses either set by the
		// client. Rebalances are incremental, as cooperative-sticky's.
		delete(defaults, "session.timeout.ms")
		delete(enforced, "partition.assignment.strategy")
	}
	m := configMap(logger, cfg.ClientConfig, defaults, enforced)
	stopLogs := bridgeLogs(logger, m, "consumer")
	c, err := kafka.NewConsumer(&m)
	if err != nil {
		stopLogs()
		return nil, createError("kafka consumer", err)
	}
	health := &linkHealth{topic: cfg.Topic, answerWithin: fetchWait(m)}
	return &Consumer{logger: logger, topic: cfg.Topic, c: c, stopLogs: stopLogs, health: health}, nil
}

// fetchWait is how long a broker may hold the consumer's fetch
// (fetch.wait.max.ms, librdkafka's 500 ms unless a property sets it; a
// value librdkafka accepted is a number).
func fetchWait(m kafka.ConfigMap) time.Duration {
	ms := 500
	if v, ok := m["fetch.wait.max.ms"]; ok {
		if n, err := strconv.Atoi(fmt.Sprint(v)); err == nil {
			ms = n
		}
	}
	return time.Duration(ms) * time.Millisecond
}

// LinkProblem says what the consumer has lacked for 10 s while a broker
// still answers its probes: its group's coordinator, or the broker it
// fetches one of its assigned partitions from (the leader, or a follower
// with client.rack set; linkhealth.go); "" when nothing. It is read from
// the statistics Poll receives.
func (c *Consumer) LinkProblem() string { return c.health.problem() }

// Subscribe joins the group. The functions are called from inside Poll, on
// the polling goroutine, when the group hands partitions to this member or
// takes them away: assigned after the partitions were added to the
// assignment (so the callee may pause them), revoked before they leave it
// (so the callee may still commit their offsets; lost is true when the
// membership was lost, e.g. a session timeout, and committing would fail or
// overwrite a new owner's progress). Either may be nil. A change of the
// assignment that librdkafka refuses makes Poll fail (rebalance).
func (c *Consumer) Subscribe(assigned func(partitions []int32), revoked func(partitions []int32, lost bool)) error {
	cb := func(kc *kafka.Consumer, ev kafka.Event) error {
		c.rebalance(kc, ev, assigned, revoked)
		return nil
	}
	if err := c.c.SubscribeTopics([]string{c.topic}, cb); err != nil {
		return fmt.Errorf("subscribe to %s: %w", c.topic, err)
	}
	return nil
}

// rebalance applies the group's change to the assignment and tells the
// callee. A change librdkafka refuses is not retried: confluent-kafka-go
// ignores the callback's error and does not make the change itself once
// the callback has tried, so partitions the group handed to this member
// would go unconsumed until the next rebalance (reproduced: a partition
// already in the assignment fails the whole IncrementalAssign), or ones it
// took away stay fetched. The error is kept for Poll, which returns it as
// fatal: the process stops, and its restart lets the group hand the
// partitions out again.
func (c *Consumer) rebalance(kc *kafka.Consumer, ev kafka.Event, assigned func([]int32), revoked func([]int32, bool)) {
	cooperative := kc.GetRebalanceProtocol() == "COOPERATIVE"
	switch e := ev.(type) {
	case kafka.AssignedPartitions:
		var err error
		if cooperative {
			err = kc.IncrementalAssign(e.Partitions)
		} else {
			err = kc.Assign(e.Partitions)
		}
		if err != nil {
			c.rebalanceFailed("assign", e.Partitions, err)
			return
		}
		if assigned != nil {
			assigned(partitionsOf(e.Partitions))
		}
	case kafka.RevokedPartitions:
		if revoked != nil {
			revoked(partitionsOf(e.Partitions), kc.AssignmentLost())
		}
		var err error
		if cooperative {
			err = kc.IncrementalUnassign(e.Partitions)
		} else {
			err = kc.Unassign()
		}
		if err != nil {
			c.rebalanceFailed("unassign", e.Partitions, err)
		}
	}
}

// rebalanceFailed logs a failed change of the assignment and keeps the
// first for Poll (one during Close is only logged: nothing polls then).
func (c *Consumer) rebalanceFailed(op string, tps []kafka.TopicPartition, err error) {
	c.logger.Error("kafka: "+op+" failed in a rebalance", "topic", c.topic, "partitions", partitionsOf(tps), "err", err)
	if c.rebalanceErr == nil {
		c.rebalanceErr = fmt.Errorf("kafka consumer: %s partitions %v of %s in a rebalance: %w", op, partitionsOf(tps), c.topic, err)
	}
}

func partitionsOf(tps []kafka.TopicPartition) []int32 {
	out := make([]int32, len(tps))
	for i, tp := range tps {
		out[i] = tp.Partition
	}
	return out
}

func (c *Consumer) tps(partitions []int32, offsets map[int32]int64) []kafka.TopicPartition {
	out := make([]kafka.TopicPartition, 0, len(partitions)+len(offsets))
	for _, p := range partitions {
		out = append(out, kafka.TopicPartition{Topic: &c.topic, Partition: p})
	}
	for p, o := range offsets {
		out = append(out, kafka.TopicPartition{Topic: &c.topic, Partition: p, Offset: kafka.Offset(o)})
	}
	return out
}

// Poll waits up to timeout for a record. It returns (nil, nil) when none
// arrived. Client errors that librdkafka recovers from by itself (a broker
// down, a transport error) are logged and not returned; a returned error is
// fatal for the consumer, as is a change of the assignment that failed in a
// rebalance the call ran.
func (c *Consumer) Poll(timeout time.Duration) (*record.Record, error) {
	if c.rebalanceErr != nil {
		return nil, c.rebalanceErr // no further rebalance on a wrong assignment
	}
	rec, err := c.poll(timeout)
	if c.rebalanceErr != nil {
		return nil, c.rebalanceErr
	}
	return rec, err
}

func (c *Consumer) poll(timeout time.Duration) (*record.Record, error) {
	deadline := time.Now().Add(timeout)
	ev := c.c.Poll(int(timeout.Milliseconds()))
	// A statistics event is no answer to the caller, who takes an empty
	// return for "caught up": poll on for the rest of the timeout.
	for {
		st, ok := ev.(*kafka.Stats)
		if !ok {
			break
		}
		c.health.observe(time.Now(), st.String())
		left := time.Until(deadline)
		if left <= 0 {
			return nil, nil
		}
		ev = c.c.Poll(int(left.Milliseconds()))
	}
	switch e := ev.(type) {
	case nil:
		return nil, nil
	case *kafka.Message:
		if e.TopicPartition.Error != nil {
			c.logger.Warn("kafka: consume error", "topic", c.topic, "partition", e.TopicPartition.Partition, "err", e.TopicPartition.Error)
			return nil, nil
		}
		r := toRecord(c.topic, e)
		return &r, nil
	case kafka.Error:
		if e.IsFatal() {
			return nil, fmt.Errorf("kafka consumer: %w", e)
		}
		if ok, held := c.errs.allow(e.Code().String(), time.Now()); ok {
			attrs := []any{"topic", c.topic, "err", e}
			if held > 0 {
				attrs = append(attrs, "repeated", held)
			}
			c.logger.Warn("kafka: consumer error (librdkafka retries by itself)", attrs...)
		}
		return nil, nil
	default:
		return nil, nil
	}
}

// Pause stops fetching the partitions. librdkafka drops what it prefetched
// for them and, on Resume, fetches again from the position after the last
// record Poll returned.
func (c *Consumer) Pause(partitions []int32) error {
	if len(partitions) == 0 {
		return nil
	}
	if err := c.c.Pause(c.tps(partitions, nil)); err != nil {
		return fmt.Errorf("pause %s: %w", c.topic, err)
	}
	c.wmMu.Lock()
	defer c.wmMu.Unlock()
	if c.paused == nil {
		c.paused, c.asked = map[int32]time.Time{}, map[int32]askedWatermark{}
	}
	now := time.Now()
	for _, p := range partitions {
		if _, ok := c.paused[p]; !ok {
			c.paused[p] = now
		}
	}
	return nil
}

// Resume restarts fetching the partitions.
func (c *Consumer) Resume(partitions []int32) error {
	if len(partitions) == 0 {
		return nil
	}
	if err := c.c.Resume(c.tps(partitions, nil)); err != nil {
		return fmt.Errorf("resume %s: %w", c.topic, err)
	}
	c.wmMu.Lock()
	defer c.wmMu.Unlock()
	for _, p := range partitions {
		delete(c.paused, p)
		delete(c.asked, p)
	}
	return nil
}

// Commit synchronously commits, per partition, the offset of the next
// record to read.
func (c *Consumer) Commit(offsets map[int32]int64) error {
	if len(offsets) == 0 {
		return nil
	}
	res, err := c.c.CommitOffsets(c.tps(nil, offsets))
	if err != nil {
		return fmt.Errorf("commit offsets of %s: %w", c.topic, err)
	}
	for _, tp := range res {
		if tp.Error != nil {
			return fmt.Errorf("commit offset of %s [%d]: %w", c.topic, tp.Partition, tp.Error)
		}
	}
	return nil
}

// Committed asks the group coordinator for the committed offsets of
// partitions (the next record to read), waiting up to timeout; a partition
// with none committed is left out.
func (c *Consumer) Committed(partitions []int32, timeout time.Duration) (map[int32]int64, error) {
	res, err := c.c.Committed(c.tps(partitions, nil), int(timeout.Milliseconds()))
	if err != nil {
		return nil, fmt.Errorf("committed offsets of %s: %w", c.topic, err)
	}
	out := make(map[int32]int64, len(res))
	for _, tp := range res {
		if tp.Error == nil && tp.Offset >= 0 {
			out[tp.Partition] = int64(tp.Offset)
		}
	}
	return out, nil
}

// HighWatermark returns the partition's high watermark, and whether one is
// known: as last seen in a fetch response (no broker round trip), or, for a
// partition paused for askWatermarkEvery or longer, as a broker answered at
// most askWatermarkEvery ago. The broker is asked only until askUntil (each
// request bounded by askWatermarkTimeout and by askUntil), so that a caller
// asking for many partitions bounds its wait as a whole: with the brokers
// hanging, each request runs out its wait, or twice it (librdkafka's query
// took 1.0 s for 500 ms with a frozen broker).
func (c *Consumer) HighWatermark(partition int32, askUntil time.Time) (int64, bool) {
	c.wmMu.Lock()
	since, paused := c.paused[partition]
	a := c.asked[partition]
	c.wmMu.Unlock()
	if paused && time.Since(since) >= askWatermarkEvery {
		if wait := min(askWatermarkTimeout, time.Until(askUntil)); time.Since(a.at) >= askWatermarkEvery && wait >= time.Millisecond {
			_, high, err := c.c.QueryWatermarkOffsets(c.topic, partition, int(wait.Milliseconds()))
			if err != nil || high < 0 {
				high = -1 // the cached one until the next ask
			}
			a = askedWatermark{high: high, at: time.Now()}
			c.wmMu.Lock()
			if _, still := c.paused[partition]; still {
				c.asked[partition] = a
			}
			c.wmMu.Unlock()
		}
		if a.high >= 0 {
			return a.high, true
		}
	}
	_, high, err := c.c.GetWatermarkOffsets(c.topic, partition)
	if err != nil || high < 0 {
		return 0, false
	}
	return high, true
}

// Probe asks a broker for the topic's metadata and reports whether one
// answered within timeout and ctx's deadline and the topic can be used (a
// *record.TopicError when not; a request begun runs out its wait, as
// Producer.Probe's). It is safe to call from any goroutine.
func (c *Consumer) Probe(ctx context.Context, timeout time.Duration) error {
	return c.health.probed(ctx, probe(ctx, c.c, c.topic, timeout))
}

// Close leaves the group (revoking the assignment through the revoked
// function given to Subscribe)
// and releases the client.
func (c *Consumer) Close() error {
	err := c.c.Close()
	c.stopLogs()
	if err != nil {
		return fmt.Errorf("close kafka consumer: %w", err)
	}
	return nil
}

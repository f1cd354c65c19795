package kafkax

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/pcp/route-processing/pkg/backoff"
	"github.com/pcp/route-processing/pkg/record"
)

// ProducerConfig configures an idempotent producer.
type ProducerConfig struct {
	ClientConfig
	// DeliveryTimeout bounds how long librdkafka tries to deliver one message
	// (message.timeout.ms; 0: 30 s). ProduceBatch waits at most this long
	// plus a margin for the reports.
	DeliveryTimeout time.Duration
	// Linger is how long librdkafka waits to fill a produce request.
	Linger time.Duration
}

// Producer is a long-lived idempotent (acks=all) producer. ProduceBatch is
// safe for concurrent use. After a fatal error (the idempotence guarantee
// broken) the underlying client is replaced on the next call; the old one is
// closed once the last call using it has returned, never under a call.
//
// Some fatal errors outlive the client: librdkafka also raises one when the
// cluster refuses the producer id (no IdempotentWrite permission, a feature
// the brokers lack), and every new client meets it again before it
// delivers anything. So when a client that replaced a fatal one hits a
// fatal error without having delivered, the next client waits
// (fatalBackoffMin, doubling per client up to fatalBackoffMax, jittered as
// package backoff does), and calls meanwhile fail with a
// *FatalWaitError, which wraps record.ErrUnavailable: the relay stops
// claiming and shows the cause in readiness instead of building a client,
// and giving a batch back, per claim.
type Producer struct {
	logger *slog.Logger
	cfg    ProducerConfig

	mu     sync.RWMutex
	p      *client // current client; retired clients are never here
	closed bool
	// stopLogs ends each client's log bridge once that client is closed.
	stopLogs map[*kafka.Producer]func()
	// After fatal errors: the last one's text, no new client before
	// nextClient, and the wait of the next client that fails the same way.
	fatalCause string
	nextClient time.Time
	fatalWait  *backoff.Backoff
}

// fatalBackoffMin and fatalBackoffMax bound the wait for a new client
// after clients in a row hit a fatal error without delivering anything.
const (
	fatalBackoffMin = time.Second
	fatalBackoffMax = 30 * time.Second
)

// FatalWaitError is a call made while the producer waits before building a
// new client, its last ones having hit fatal errors before delivering
// anything. It wraps record.ErrUnavailable (nothing was sent, and the
// cause is the cluster's or the deployment's, not a record's) and
// record.ErrClientUnusable (the brokers may well answer).
type FatalWaitError struct {
	// Cause is the last fatal error's text.
	Cause string
	// Next is when the next client is built (a time, not a countdown: the
	// text may be shown long after, e.g. as a readiness reason).
	Next time.Time
}

func (e *FatalWaitError) Error() string {
	return fmt.Sprintf("kafka producer: new clients keep hitting a fatal error before delivering anything (%s); the next is built at %s",
		e.Cause, e.Next.UTC().Format("15:04:05.000Z"))
}

func (e *FatalWaitError) Unwrap() []error {
	return []error{record.ErrUnavailable, record.ErrClientUnusable}
}

// LinkProblem says what the producer has lacked for 10 s while a broker
// still answers its probes: the leader of a partition it has produced to
// lately (linkhealth.go); "" when nothing. It reads the current client.
func (pr *Producer) LinkProblem() string {
	pr.mu.RLock()
	defer pr.mu.RUnlock()
	if pr.p == nil {
		return ""
	}
	return pr.p.health.problem()
}

// client is a librdkafka producer with the count of calls using it.
type client struct {
	p *kafka.Producer
	// health reads this client's statistics (LinkProblem): a new client's
	// counters start at zero, and a retired one's still come while it
	// drains.
	health *linkHealth

	// replaced is set on a client built after a fatal error; delivered
	// once a record it sent was acknowledged (dropLocked).
	replaced  bool
	delivered atomic.Bool

	mu      sync.Mutex
	refs    int
	retired bool
	idle    chan struct{} // closed once retired with no call using it
}

func newClientRef(p *kafka.Producer, health *linkHealth) *client {
	return &client{p: p, health: health, idle: make(chan struct{})}
}

// acquire counts a call; it fails once the client is retired. Callers take
// it under Producer.mu (read), and retire runs under Producer.mu (write)
// together with the swap of Producer.p, so the current client never fails.
func (c *client) acquire() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.retired {
		return false
	}
	c.refs++
	return true
}

func (c *client) release() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.refs--
	if c.retired && c.refs == 0 {
		close(c.idle)
	}
}

// retire takes no new calls; idle closes when the last call returns.
func (c *client) retire() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.retired {
		return
	}
	c.retired = true
	if c.refs == 0 {
		close(c.idle)
	}
}

// producerEnforced are the settings that at-least-once, in-order delivery
// rests on; operators cannot override them.
func producerEnforced(cfg ProducerConfig) kafka.ConfigMap {
	return kafka.ConfigMap{
		"enable.idempotence":                    true,
		"acks":                                  "all",
		"max.in.flight.requests.per.connection": 5,
		"message.timeout.ms":                    int(cfg.DeliveryTimeout.Milliseconds()),
		// Delivery reports go to per-call channels and carry only the
		// error and the Opaque index: copying keys, values and headers back
		// would double the memory traffic of a batch. Events() carries only
		// client-level errors, drained into the log, and the statistics
		// (LinkProblem).
		"go.delivery.reports":       true,
		"go.delivery.report.fields": "none",
		"go.produce.channel.size":   0,
		"go.events.channel.size":    1000,
	}
}

// Compression is the producers' default compression.type (an operator may
// set another with KAFKA_PRODUCER_PROPERTY_COMPRESSION_TYPE). Not lz4:
// librdkafka sets up a new LZ4 frame context for every produce request,
// allocating and zeroing its buffers, which cost the relay a fifth of its
// CPU at 500 passports/s (perf: memset, page faults and madvise in
// LZ4F_compressBegin); snappy compresses the JSON events as well (to 80 %
// of their size one at a time, 62 % a hundred at a time; lz4: 83 %, 60 %)
// without that cost (the relay's CPU as with no compression at all).
const Compression = "snappy"

// NewProducer creates the producer. It does not wait for the brokers:
// librdkafka starts connecting to them in the background.
func NewProducer(logger *slog.Logger, cfg ProducerConfig) (*Producer, error) {
	if cfg.DeliveryTimeout <= 0 {
		cfg.DeliveryTimeout = 30 * time.Second
	}
	pr := &Producer{logger: logger, cfg: cfg, stopLogs: map[*kafka.Producer]func(){},
		fatalWait: backoff.New(fatalBackoffMin, fatalBackoffMax)}
	c, err := pr.newClient()
	if err != nil {
		return nil, err
	}
	pr.p = c
	return pr, nil
}

func (pr *Producer) newClient() (*client, error) {
	m := configMap(pr.logger, pr.cfg.ClientConfig, kafka.ConfigMap{
		"linger.ms":               int(pr.cfg.Linger.Milliseconds()),
		"compression.type":        Compression,
		"batch.num.messages":      10000,
		"socket.keepalive.enable": true,
		// A key goes to the partition the Java clients (and so Kafka
		// Streams and Spring) put it in: murmur2 of the key; a record
		// without a key to any partition. librdkafka's default (CRC32 of
		// the key) put a route's events elsewhere than a Java producer of
		// the same topic would, which breaks co-partitioned joins
		// downstream, and put a dead letter on another partition of the
		// DLQ than the Java producer of its original (same key, same
		// partition count) had chosen.
		"partitioner": "murmur2_random",
		// librdkafka's own default (1,000,000 bytes) is below the
		// ingestor's 1 MiB record limit, so a dead-lettered record near the
		// limit would fail locally; the topic's max.message.bytes is the
		// limit that matters.
		"message.max.bytes": 16 << 20,
		// For LinkProblem (linkhealth.go).
		"statistics.interval.ms": int(statsInterval.Milliseconds()),
	}, producerEnforced(pr.cfg))
	stopLogs := bridgeLogs(pr.logger, m, "producer")
	p, err := kafka.NewProducer(&m)
	if err != nil {
		stopLogs()
		return nil, createError("kafka producer", err)
	}
	pr.stopLogs[p] = stopLogs // callers hold pr.mu or own pr exclusively
	// A record waits for its partition's leader up to the delivery
	// timeout before the relay postpones its row and sends it again.
	health := &linkHealth{needFor: pr.cfg.DeliveryTimeout + linkGrace}
	go pr.drainEvents(p.Events(), health)
	return newClientRef(p, health), nil
}

// closeClient retires c, waits until no call uses it, then closes it and
// ends its log bridge.
func (pr *Producer) closeClient(c *client) {
	c.retire()
	<-c.idle
	p := c.p
	p.Close()
	pr.mu.Lock()
	stop := pr.stopLogs[p]
	delete(pr.stopLogs, p)
	pr.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// drainEvents logs client-level events (connection errors, fatal errors)
// and hands the client's statistics to health; the channel is closed by
// the client's Close.
func (pr *Producer) drainEvents(events chan kafka.Event, health *linkHealth) {
	for ev := range events {
		if st, ok := ev.(*kafka.Stats); ok {
			health.observe(time.Now(), st.String())
			continue
		}
		if kerr, ok := ev.(kafka.Error); ok {
			lvl := slog.LevelDebug // transport errors repeat per reconnect; librdkafka logs them too
			if kerr.IsFatal() {
				lvl = slog.LevelError
			}
			pr.logger.Log(context.Background(), lvl, "kafka: producer error", "err", kerr, "code", kerr.Code().String())
		}
	}
}

// client returns the current client with a call counted on it (release it
// when done), replacing a client in the fatal state first.
func (pr *Producer) client() (*client, error) {
	pr.mu.RLock()
	c, closed := pr.p, pr.closed
	if !closed && c != nil && c.p.GetFatalError() == nil && c.acquire() {
		pr.mu.RUnlock()
		return c, nil
	}
	pr.mu.RUnlock()
	if closed {
		return nil, errClosed
	}
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if pr.closed {
		return nil, errClosed
	}
	if pr.p != nil && pr.p.p.GetFatalError() == nil && pr.p.acquire() {
		return pr.p, nil
	}
	if pr.p != nil {
		pr.dropLocked(pr.p.p.GetFatalError())
	}
	if time.Now().Before(pr.nextClient) {
		return nil, &FatalWaitError{Cause: pr.fatalCause, Next: pr.nextClient}
	}
	nc, err := pr.newClient()
	if err != nil {
		pr.p = nil
		return nil, err
	}
	nc.replaced = pr.fatalCause != ""
	pr.p = nc
	pr.p.acquire()
	return pr.p, nil
}

// reset drops c after a fatal error so that the next call builds a new
// client; c is closed once the calls still using it have returned.
func (pr *Producer) reset(c *client, cause error) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if pr.p != c {
		return
	}
	pr.dropLocked(cause)
}

// dropLocked retires the current client after a fatal error (cause); it
// is closed once the calls still using it have returned, and the next call
// builds a new one: at once, unless the client replaced a fatal one and
// delivered nothing (see Producer). pr.mu must be held.
func (pr *Producer) dropLocked(cause error) {
	old := pr.p
	pr.fatalCause = fmt.Sprint(cause)
	if !old.replaced || old.delivered.Load() {
		pr.fatalWait.Reset()
		pr.nextClient = time.Time{}
		pr.logger.Error("kafka: producer hit a fatal error; recreating it", "err", cause)
	} else {
		wait := pr.fatalWait.Next()
		pr.nextClient = time.Now().Add(wait)
		pr.logger.Error("kafka: producer hit a fatal error again before delivering anything; recreating it after a wait (the cause outlives clients: the cluster may refuse this client's producer id, e.g. for want of the IdempotentWrite permission)",
			"err", cause, "wait", wait.Round(time.Millisecond))
	}
	pr.p = nil
	old.retire()
	go pr.closeClient(old)
}

// Probe asks the cluster for metadata of topic (or, when topic is "", for
// the broker list only) and reports whether a broker answered within timeout
// and ctx's deadline and, given a topic, whether the topic can be used (a
// *record.TopicError when not). The request runs out its wait even if ctx
// is cancelled meanwhile (librdkafka takes no cancellation).
func (pr *Producer) Probe(ctx context.Context, topic string, timeout time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c, err := pr.client()
	if err != nil {
		return err
	}
	defer c.release()
	return c.health.probed(ctx, probe(ctx, c.p, topic, timeout))
}

// Close flushes what is queued (up to timeout), purges what is left (its
// calls get ErrPurgeQueue/ErrPurgeInflight: not attempted), and closes the
// client once no call uses it. Calls after Close fail (ProduceBatch's
// errors wrap record.ErrNotAttempted).
func (pr *Producer) Close(timeout time.Duration) {
	pr.mu.Lock()
	c := pr.p
	pr.closed = true
	pr.p = nil
	if c != nil {
		c.retire()
	}
	pr.mu.Unlock()
	if c == nil {
		return
	}
	if c.p.Flush(int(timeout.Milliseconds())) > 0 {
		// A frozen or unreachable broker: do not let the close wait for
		// requests that will not be answered.
		_ = c.p.Purge(kafka.PurgeQueue | kafka.PurgeInFlight | kafka.PurgeNonBlocking)
	}
	pr.closeClient(c)
}

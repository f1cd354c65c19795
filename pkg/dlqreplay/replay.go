package dlqreplay

import (
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"time"

	"github.com/pcp/route-processing/pkg/dlq"
	"github.com/pcp/route-processing/pkg/record"
)

// Reader reads a topic without a consumer group. *kafkax.Reader implements it.
type Reader interface {
	// Partitions returns the topic's partition ids in ascending order.
	Partitions(ctx context.Context, topic string) ([]int32, error)
	// Watermarks returns the partition's first offset and one past its last.
	Watermarks(ctx context.Context, topic string, partition int32) (low, high int64, err error)
	// OffsetForTime returns the first offset whose record timestamp is at or
	// after t (every earlier record is older); ok is false when none is.
	OffsetForTime(ctx context.Context, topic string, partition int32, t time.Time) (offset int64, ok bool, err error)
	// ReadRanges calls fn for every record in the ranges, in offset order
	// within a partition, and returns when all are read or fn fails (with
	// fn's error).
	ReadRanges(ctx context.Context, topic string, ranges []record.PartitionRange, fn func(record.Record) error) error
}

// Producer sends records and waits for their delivery. *kafkax.Producer
// implements it.
type Producer interface {
	// ProduceBatch sends every record and waits for every delivery
	// report; the i-th error is nil when recs[i] was acknowledged by all
	// in-sync replicas.
	ProduceBatch(ctx context.Context, recs []record.Record) []error
}

// Config configures a replay.
type Config struct {
	// DLQTopic is read (TOPIC_INPUT_DLQ).
	DLQTopic string
	// Topic receives the replayed records (TOPIC_INPUT, or --to).
	Topic string
	// OutputTopics are the relay's event topics (TOPIC_PROCESSED_ROUTE,
	// TOPIC_ROUTE_GEOREFERENCE), never a target: downstream services
	// would read dead-lettered input as events.
	OutputTopics []string
	// Filter selects the records.
	Filter Filter
	// DryRun lists the selected records and sends nothing.
	DryRun bool
	// BatchSize is the most records sent before waiting for their
	// delivery reports. Default 500.
	BatchSize int
}

// Validate reports the first bad setting.
func (c Config) Validate() error {
	switch {
	case c.DLQTopic == "":
		return errors.New("no DLQ topic")
	case c.Topic == "":
		return errors.New("no target topic")
	case c.Topic == c.DLQTopic:
		// Would append each selected record to the log being read, with
		// its dead-letter headers stripped: never what an operator wants.
		return fmt.Errorf("target topic %s is the DLQ topic", c.Topic)
	case slices.Contains(c.OutputTopics, c.Topic):
		return fmt.Errorf("target topic %s is an output topic: its consumers would read dead-lettered input as events", c.Topic)
	case c.BatchSize < 0:
		return fmt.Errorf("batch size %d is negative", c.BatchSize)
	}
	return c.Filter.Validate()
}

// Result counts what a run did.
type Result struct {
	// Scanned is how many DLQ records were read.
	Scanned int
	// Selected is how many of them matched the filter.
	Selected int
	// Replayed is how many were acknowledged by the target topic.
	Replayed int
	// Skipped is how many were read but not selected.
	Skipped int
	// Failed is how many were sent but not acknowledged; they may still
	// have been delivered (at least once).
	Failed int
	// Omitted is how many selected records were not sent because the DLQ
	// holds them without their value (dlq.HeaderValueOmitted), or without
	// the original's key and headers (dlq.OmitOriginal): replayed, each
	// would be another record (without its value an empty one, a
	// tombstone, on a compacted topic a delete of its key) and
	// dead-lettered again for that.
	Omitted int
}

// String is the summary line, e.g.
// "selected=3 replayed=3 skipped=7 failed=0 scanned=10" (and " omitted=N"
// when some were).
func (r Result) String() string {
	s := fmt.Sprintf("selected=%d replayed=%d skipped=%d failed=%d scanned=%d", r.Selected, r.Replayed, r.Skipped, r.Failed, r.Scanned)
	if r.Omitted > 0 {
		s += fmt.Sprintf(" omitted=%d", r.Omitted)
	}
	return s
}

// ErrDeliveryFailed is returned when a replayed record was not acknowledged.
var ErrDeliveryFailed = errors.New("delivery failed")

// Replayer copies selected dead-lettered records back to the input topic.
type Replayer struct {
	logger   *slog.Logger
	reader   Reader
	producer Producer
	out      io.Writer
	cfg      Config
}

// New returns a Replayer that reads with reader, sends with producer (which
// may be nil for a dry run) and writes one line per selected record to out.
func New(logger *slog.Logger, reader Reader, producer Producer, out io.Writer, cfg Config) (*Replayer, error) {
	cfg.BatchSize = cmp.Or(cfg.BatchSize, 500)
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if producer == nil && !cfg.DryRun {
		return nil, errors.New("dlq-replay: no producer for a run that is not a dry run")
	}
	return &Replayer{logger: logger.With("component", "dlq-replay"), reader: reader, producer: producer, out: out, cfg: cfg}, nil
}

type selected struct {
	rec  record.Record
	info dlq.Info
}

// Run reads the DLQ up to the high watermarks it captures first, and sends
// each selected record to the target topic with its original key, value and
// headers (the dead-letter headers dropped), in DLQ order, in batches; it
// waits for every delivery report of a batch before reading on. It stops at
// the first batch with a failed delivery and then returns an error wrapping
// ErrDeliveryFailed, or ctx's error when ctx ended while the batch was sent
// (a stop, not the brokers' refusal). The Result is meaningful whatever the
// error.
func (r *Replayer) Run(ctx context.Context) (Result, error) {
	var res Result
	ranges, err := r.plan(ctx)
	if err != nil {
		return res, err
	}

	var targetParts []int32
	if !r.cfg.DryRun {
		targetParts = r.targetPartitions(ctx)
	}
	var batch []selected
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		recs := make([]record.Record, len(batch))
		for i, s := range batch {
			recs[i] = record.Record{
				Topic:   r.cfg.Topic,
				Key:     s.rec.Key,
				Value:   s.rec.Value,
				Headers: dlq.Strip(s.rec.Headers),
			}
			if s.info.OriginalTopic == r.cfg.Topic && slices.Contains(targetParts, s.info.OriginalPartition) {
				recs[i].Partition, recs[i].Pinned = s.info.OriginalPartition, true
			}
		}
		errs := r.producer.ProduceBatch(ctx, recs)
		failed := 0
		for i, s := range batch {
			if errs[i] != nil {
				failed++
				fmt.Fprintf(r.out, "failed %s err=%q\n", describe(s.rec, s.info), errs[i].Error())
				if ctx.Err() == nil { // a stop is said once, by the error Run returns
					r.logger.ErrorContext(ctx, "delivery failed", "dlq_partition", s.rec.Partition, "dlq_offset", s.rec.Offset, "err", errs[i])
				}
				continue
			}
			fmt.Fprintf(r.out, "replayed %s\n", describe(s.rec, s.info))
		}
		res.Replayed += len(batch) - failed
		res.Failed += failed
		batch = batch[:0]
		if failed > 0 && ctx.Err() != nil {
			// A stop (Ctrl-C, SIGTERM) cut the batch: say so, not that
			// the brokers refused it.
			return fmt.Errorf("interrupted with %d of %d records of a batch to %s not acknowledged: %w", failed, len(recs), r.cfg.Topic, ctx.Err())
		}
		if failed > 0 {
			return fmt.Errorf("%d of %d records of a batch to %s: %w", failed, len(recs), r.cfg.Topic, ErrDeliveryFailed)
		}
		return nil
	}

	err = r.reader.ReadRanges(ctx, r.cfg.DLQTopic, ranges, func(rec record.Record) error {
		res.Scanned++
		info := dlq.Decode(rec.Headers)
		if !r.cfg.Filter.Match(rec, info) {
			res.Skipped++
			return nil
		}
		res.Selected++
		if info.Incomplete() {
			res.Omitted++
			fmt.Fprintf(r.out, "cannot-replay %s (the DLQ holds only part of the record; the original is at original_partition/original_offset of the input topic while its retention lasts)\n", describe(rec, info))
			return nil
		}
		if r.cfg.DryRun {
			fmt.Fprintf(r.out, "would-replay %s\n", describe(rec, info))
			return nil
		}
		batch = append(batch, selected{rec: rec, info: info})
		if len(batch) >= r.cfg.BatchSize {
			return flush()
		}
		return nil
	})
	if err == nil {
		err = flush()
	}
	if res.Omitted > 0 {
		r.logger.WarnContext(ctx, "selected records held without their value were not replayed", "omitted", res.Omitted)
	}
	if err != nil {
		if unsent := res.Selected - res.Replayed - res.Failed - res.Omitted; unsent > 0 && !r.cfg.DryRun {
			r.logger.ErrorContext(ctx, "stopped early; selected records were not sent", "unsent", unsent)
		}
		return res, fmt.Errorf("dlq-replay %s -> %s: %w", r.cfg.DLQTopic, r.cfg.Topic, err)
	}
	return res, nil
}

// targetPartitions lists the target topic's partitions, nil when its
// metadata cannot be read (the records then go where the producer's
// partitioner puts them). A record replayed to the topic it came from goes
// back to its original partition, where the producers of the topic put its
// key, so that it is read in order with that key's other records (the
// partitioner here, librdkafka's CRC32 of the key, is not the Java
// clients' murmur2); the ingestor's guard of a route's later record
// compares offsets within a partition only.
func (r *Replayer) targetPartitions(ctx context.Context) []int32 {
	parts, err := r.reader.Partitions(ctx, r.cfg.Topic)
	if err != nil {
		r.logger.WarnContext(ctx, "cannot read the target topic's partitions; records go where the partitioner puts them, not back to their original partitions",
			"topic", r.cfg.Topic, "err", err)
		return nil
	}
	return parts
}

// plan resolves the filter into one offset range per selected partition,
// capturing the high watermarks so that the run ends.
func (r *Replayer) plan(ctx context.Context) ([]record.PartitionRange, error) {
	f := r.cfg.Filter
	all, err := r.reader.Partitions(ctx, r.cfg.DLQTopic)
	if err != nil {
		return nil, err
	}
	parts, err := f.partitionsToRead(r.cfg.DLQTopic, all)
	if err != nil {
		return nil, err
	}
	ranges := make([]record.PartitionRange, 0, len(parts))
	for _, p := range parts {
		low, high, err := r.reader.Watermarks(ctx, r.cfg.DLQTopic, p)
		if err != nil {
			return nil, err
		}
		var sinceOffset int64
		var sinceFound bool
		if !f.Since.IsZero() {
			if sinceOffset, sinceFound, err = r.reader.OffsetForTime(ctx, r.cfg.DLQTopic, p, f.Since); err != nil {
				return nil, err
			}
		}
		rg := f.offsetRange(p, low, high, sinceOffset, sinceFound)
		r.logger.InfoContext(ctx, "reading", "topic", r.cfg.DLQTopic, "partition", p,
			"from_offset", rg.Start, "end_offset", rg.End, "low_watermark", low, "high_watermark", high)
		ranges = append(ranges, rg)
	}
	return ranges, nil
}

// describe is one record's line: identifiers and sizes, never the value.
func describe(rec record.Record, info dlq.Info) string {
	b := make([]byte, 0, 256)
	b = fmt.Appendf(b, "dlq_partition=%d dlq_offset=%d", rec.Partition, rec.Offset)
	if !rec.Timestamp.IsZero() {
		b = fmt.Appendf(b, " dlq_time=%s", rec.Timestamp.UTC().Format(time.RFC3339Nano))
	}
	b = fmt.Appendf(b, " original_topic=%s original_partition=%s original_offset=%s",
		strconv.Quote(info.OriginalTopic), orUnknown(int64(info.OriginalPartition)), orUnknown(info.OriginalOffset))
	if !info.OriginalTimestamp.IsZero() {
		b = fmt.Appendf(b, " original_time=%s", info.OriginalTimestamp.Format(time.RFC3339Nano))
	}
	b = fmt.Appendf(b, " category=%s field=%s %s %s value_bytes=%d",
		strconv.Quote(string(info.Category)), strconv.Quote(info.Field), exceptionText(info), keyText(rec.Key), len(rec.Value))
	if info.ValueOmittedBytes > 0 {
		b = fmt.Appendf(b, " value_omitted_bytes=%d", info.ValueOmittedBytes)
	}
	if info.KeyOmittedBytes > 0 {
		b = fmt.Appendf(b, " key_omitted_bytes=%d", info.KeyOmittedBytes)
	}
	if info.HeadersOmitted > 0 {
		b = fmt.Appendf(b, " headers_omitted=%d", info.HeadersOmitted)
	}
	return string(b)
}

func orUnknown(v int64) string {
	if v < 0 {
		return "?"
	}
	return strconv.FormatInt(v, 10)
}

// keyText names a record's key by its size and a fingerprint: the
// contract lets a key be anything, user data included, and the ingestor
// itself logs only its size. The fingerprint tells records with the same
// key apart from others without showing it.
func keyText(k []byte) string {
	if k == nil {
		return "key=null"
	}
	sum := sha256.Sum256(k)
	return fmt.Sprintf("key_bytes=%d key_sha256=%x", len(k), sum[:4])
}

// exceptionText is the letter's exception message when this service wrote
// it (pcp-error-category set: its messages name fields and rules, never
// values), else only its size: another producer's (a Spring listener's)
// may quote the payload.
func exceptionText(info dlq.Info) string {
	if info.Category == "" {
		return fmt.Sprintf("exception_bytes=%d", len(info.ExceptionMessage))
	}
	return "exception=" + quoteTrunc([]byte(info.ExceptionMessage), 500)
}

// quoteTrunc quotes b (Go syntax, so binary bytes stay visible and the
// line stays one line), keeping at most n bytes of it.
func quoteTrunc(b []byte, n int) string {
	if len(b) <= n {
		return strconv.Quote(string(b))
	}
	return strconv.Quote(string(b[:n])) + "..."
}

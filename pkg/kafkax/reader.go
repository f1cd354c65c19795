package kafkax

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/pcp/route-processing/pkg/record"
)

// ReaderConfig configures a Reader.
type ReaderConfig struct {
	ClientConfig
	// GroupID is the group.id librdkafka insists on even for a consumer that
	// only assigns partitions. The Reader never joins this group and never
	// commits to it; it only has to be a name the cluster's ACLs accept.
	// Default "kafkax-reader".
	GroupID string
	// RequestTimeout bounds each metadata, watermark and offsets-for-times
	// request (a cancelled context ends one within a second). Default 30s.
	RequestTimeout time.Duration
	// IdleTimeout makes ReadRanges fail with errTimeout when neither a
	// record nor an end-of-partition arrives for this long (the brokers are
	// unreachable, or the reader lacks rights), so that a tool using it
	// always ends. Default 1m.
	IdleTimeout time.Duration
}

// Reader reads fixed offset ranges of a topic without a consumer group:
// partitions are assigned, never subscribed, and nothing is committed. So a
// Reader never disturbs a group's members or committed positions (unlike
// joining the service's group, which would rebalance the running ingestor),
// and a read ends once its ranges are read. A Reader is not safe for
// concurrent use.
type Reader struct {
	logger   *slog.Logger
	cfg      ReaderConfig
	c        *kafka.Consumer
	stopLogs func()
}

// readerEnforced are the settings a group-less, terminating read rests on.
func readerEnforced(cfg ReaderConfig) kafka.ConfigMap {
	return kafka.ConfigMap{
		"group.id":                        cfg.GroupID,
		"enable.auto.commit":              false,
		"enable.auto.offset.store":        false,
		"enable.partition.eof":            true,
		"auto.offset.reset":               "earliest", // a start below the log start (retention) reads from the log start
		"go.events.channel.enable":        false,
		"go.application.rebalance.enable": false,
	}
}

// NewReader creates a Reader. It does not wait for the brokers:
// librdkafka starts connecting to them in the background.
func NewReader(logger *slog.Logger, cfg ReaderConfig) (*Reader, error) {
	if cfg.GroupID == "" {
		cfg.GroupID = "kafkax-reader"
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = 30 * time.Second
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = time.Minute
	}
	m := configMap(logger, cfg.ClientConfig, kafka.ConfigMap{
		"isolation.level": "read_committed",
	}, readerEnforced(cfg))
	stopLogs := bridgeLogs(logger, m, "reader")
	c, err := kafka.NewConsumer(&m)
	if err != nil {
		stopLogs()
		return nil, createError("kafka reader", err)
	}
	return &Reader{logger: logger, cfg: cfg, c: c, stopLogs: stopLogs}, nil
}

// Close closes the client.
func (r *Reader) Close() error {
	err := r.c.Close()
	r.stopLogs()
	if err != nil {
		return fmt.Errorf("close kafka reader: %w", err)
	}
	return nil
}

// requestSlice bounds one blocking librdkafka request of [Reader.request]:
// the call cannot be interrupted, so this is how long a cancelled ctx (an
// operator's Ctrl-C) may wait for it.
const requestSlice = time.Second

// request runs call, a blocking librdkafka request given its timeout in
// milliseconds, within RequestTimeout and ctx: in slices of at most
// requestSlice, again after each slice that ended because no broker
// answered in time, until one answers, ctx ends or the time is up.
func (r *Reader) request(ctx context.Context, call func(ms int) error) error {
	deadline := time.Now().Add(r.cfg.RequestTimeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return context.DeadlineExceeded
		}
		err := call(max(1, int(min(left, requestSlice).Milliseconds())))
		if !noAnswerYet(err) || time.Until(deadline) <= 0 {
			return err
		}
	}
}

// noAnswerYet reports a request that ended because no broker answered in
// its time (librdkafka keeps connecting meanwhile), not because of what a
// broker said.
func noAnswerYet(err error) bool {
	var ke kafka.Error
	if !errors.As(err, &ke) {
		return false
	}
	switch ke.Code() {
	case kafka.ErrTimedOut, kafka.ErrTimedOutQueue, kafka.ErrTransport, kafka.ErrAllBrokersDown:
		return true
	}
	return false
}

// Partitions returns the partition ids of topic, in ascending order.
func (r *Reader) Partitions(ctx context.Context, topic string) ([]int32, error) {
	var md *kafka.Metadata
	err := r.request(ctx, func(ms int) (err error) {
		md, err = r.c.GetMetadata(&topic, false, ms)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("kafka metadata of %s: %w", topic, err)
	}
	if err := topicMissing(md, topic); err != nil {
		return nil, fmt.Errorf("kafka metadata: %w", err)
	}
	tm := md.Topics[topic]
	ids := make([]int32, 0, len(tm.Partitions))
	for _, p := range tm.Partitions {
		ids = append(ids, p.ID)
	}
	slices.Sort(ids)
	return ids, nil
}

// Watermarks asks the partition leader for the partition's low watermark
// (first offset still in the log) and high watermark (one past the last).
func (r *Reader) Watermarks(ctx context.Context, topic string, partition int32) (low, high int64, err error) {
	err = r.request(ctx, func(ms int) (err error) {
		low, high, err = r.c.QueryWatermarkOffsets(topic, partition, ms)
		return err
	})
	if err != nil {
		return 0, 0, fmt.Errorf("kafka watermarks of %s/%d: %w", topic, partition, err)
	}
	return low, high, nil
}

// OffsetForTime returns the first offset of the partition whose record
// timestamp is at or after t; every earlier offset holds an earlier
// timestamp. ok is false when no record is that recent.
func (r *Reader) OffsetForTime(ctx context.Context, topic string, partition int32, t time.Time) (offset int64, ok bool, err error) {
	var res []kafka.TopicPartition
	err = r.request(ctx, func(ms int) (err error) {
		res, err = r.c.OffsetsForTimes([]kafka.TopicPartition{{
			Topic: &topic, Partition: partition, Offset: kafka.Offset(t.UnixMilli()),
		}}, ms)
		return err
	})
	if err != nil {
		return 0, false, fmt.Errorf("kafka offsets for time of %s/%d: %w", topic, partition, err)
	}
	if len(res) != 1 {
		return 0, false, fmt.Errorf("kafka offsets for time of %s/%d: %d answers", topic, partition, len(res))
	}
	if res[0].Error != nil {
		return 0, false, fmt.Errorf("kafka offsets for time of %s/%d: %w", topic, partition, res[0].Error)
	}
	if res[0].Offset < 0 {
		return 0, false, nil
	}
	return int64(res[0].Offset), true, nil
}

// ReadRanges calls fn with every record of topic in ranges, in offset order
// within a partition, and returns once every range is read, fn fails, ctx
// ends, or nothing arrives for IdleTimeout. Empty ranges are skipped. A range
// also ends at the partition's end as the broker sees it (end-of-partition),
// so offsets that hold no readable record (transaction markers, records of
// aborted or still open transactions, compacted records) do not stall it.
// fn may block; nothing times out while it runs.
func (r *Reader) ReadRanges(ctx context.Context, topic string, ranges []record.PartitionRange, fn func(record.Record) error) error {
	ends := make(map[int32]int64, len(ranges))
	var assign []kafka.TopicPartition
	for _, rg := range ranges {
		if rg.Start >= rg.End {
			continue
		}
		if _, dup := ends[rg.Partition]; dup {
			return fmt.Errorf("read %s: partition %d given twice", topic, rg.Partition)
		}
		ends[rg.Partition] = rg.End
		assign = append(assign, kafka.TopicPartition{Topic: &topic, Partition: rg.Partition, Offset: kafka.Offset(max(rg.Start, 0))})
	}
	if len(assign) == 0 {
		return nil
	}
	if err := r.c.Assign(assign); err != nil {
		return fmt.Errorf("read %s: assign: %w", topic, err)
	}
	defer func() {
		if err := r.c.Unassign(); err != nil {
			r.logger.Warn("kafka: reader unassign failed", "topic", topic, "err", err)
		}
	}()

	finish := func(p int32) {
		delete(ends, p)
		// Stop fetching what will not be read.
		_ = r.c.Pause([]kafka.TopicPartition{{Topic: &topic, Partition: p}})
	}
	lastProgress := time.Now()
	for len(ends) > 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		if idle := time.Since(lastProgress); idle > r.cfg.IdleTimeout {
			return fmt.Errorf("read %s: nothing received for %s (%d partitions unfinished): %w", topic, idle.Round(time.Second), len(ends), errTimeout)
		}
		switch e := r.c.Poll(100).(type) {
		case *kafka.Message:
			if e.TopicPartition.Topic == nil || *e.TopicPartition.Topic != topic {
				continue
			}
			p, off := e.TopicPartition.Partition, int64(e.TopicPartition.Offset)
			end, reading := ends[p]
			if !reading {
				continue
			}
			if perr := e.TopicPartition.Error; perr != nil {
				var kerr kafka.Error
				if errors.As(perr, &kerr) && readerMustStop(kerr) {
					return fmt.Errorf("read %s [%d]: %w", topic, p, perr)
				}
				r.logger.WarnContext(ctx, "kafka: reader error", "topic", topic, "partition", p, "err", perr)
				continue
			}
			lastProgress = time.Now()
			if off >= end {
				finish(p)
				continue
			}
			if err := fn(toRecord(topic, e)); err != nil {
				return err
			}
			lastProgress = time.Now()
			if off >= end-1 {
				finish(p)
			}
		case kafka.PartitionEOF:
			if e.Topic == nil || *e.Topic != topic {
				continue
			}
			if _, reading := ends[e.Partition]; reading {
				lastProgress = time.Now()
				finish(e.Partition)
			}
		case kafka.Error:
			if readerMustStop(e) {
				return fmt.Errorf("read %s: %w", topic, e)
			}
			// Transient (brokers down, coordinator moves ...), or about the
			// group the Reader does not use: librdkafka recovers by itself,
			// and IdleTimeout bounds the wait.
			r.logger.WarnContext(ctx, "kafka: reader error", "topic", topic, "err", e)
		}
	}
	return nil
}

// readerMustStop reports the errors after which a read cannot progress.
func readerMustStop(e kafka.Error) bool {
	if e.IsFatal() {
		return true
	}
	switch e.Code() {
	case kafka.ErrUnknownTopicOrPart, kafka.ErrUnknownTopic, kafka.ErrUnknownPartition,
		kafka.ErrTopicAuthorizationFailed, kafka.ErrClusterAuthorizationFailed,
		kafka.ErrSaslAuthenticationFailed, kafka.ErrAuthentication:
		return true
	}
	return false
}

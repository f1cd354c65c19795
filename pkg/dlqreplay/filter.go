package dlqreplay

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/pcp/route-processing/pkg/dlq"
	"github.com/pcp/route-processing/pkg/record"
)

// Filter selects dead-lettered records; a record is selected when it passes
// every condition that is set (AND). The zero Filter selects every record.
//
// Partitions and offsets are those of the DLQ topic, as listed by a dry run.
// Since and Until compare the DLQ record's own timestamp, i.e. when it was
// dead-lettered (the ingestor produces it then; a topic with
// message.timestamp.type=LogAppendTime gives the broker's append time), not
// kafka_dlt-original-timestamp: the DLQ timestamp is what the broker's time
// index knows, so Since can seek instead of scanning the whole DLQ, and "the
// records that failed while the bug was live" is the usual question.
type Filter struct {
	// Partitions are the DLQ partitions to read; empty means all.
	Partitions []int32
	// FromOffset is the first DLQ offset to select (inclusive) in each
	// selected partition; 0 means from the start of the log.
	FromOffset int64
	// EndOffset is one past the last DLQ offset to select in each selected
	// partition (--to-offset + 1); 0 means up to the high watermark
	// captured when the run starts.
	EndOffset int64
	// Since selects records whose DLQ timestamp is at or after it (zero: no bound).
	Since time.Time
	// Until selects records whose DLQ timestamp is before it (zero: no bound).
	Until time.Time
	// Category selects records whose pcp-error-category equals it
	// (CONTRACT, RETRYABLE or FATAL); empty means any, including none.
	Category dlq.Category
	// FieldPrefix selects records whose pcp-error-field starts with it;
	// empty means any, including none.
	FieldPrefix string
}

// Validate reports the first inconsistent condition.
func (f Filter) Validate() error {
	for _, p := range f.Partitions {
		if p < 0 {
			return fmt.Errorf("partition %d is negative", p)
		}
	}
	if f.FromOffset < 0 {
		return fmt.Errorf("from-offset %d is negative", f.FromOffset)
	}
	if f.EndOffset < 0 {
		return fmt.Errorf("to-offset %d is negative", f.EndOffset-1)
	}
	if f.EndOffset > 0 && f.EndOffset <= f.FromOffset {
		return fmt.Errorf("to-offset %d is before from-offset %d", f.EndOffset-1, f.FromOffset)
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Since.Before(f.Until) {
		return fmt.Errorf("until %s is not after since %s", f.Until.Format(time.RFC3339Nano), f.Since.Format(time.RFC3339Nano))
	}
	if _, ok := dlq.ParseCategory(string(f.Category)); f.Category != "" && !ok {
		return fmt.Errorf("category %q is not one of %s", f.Category, categoryList())
	}
	return nil
}

// ErrNoSuchPartition is returned when a selected partition is not in the topic.
var ErrNoSuchPartition = errors.New("no such partition")

// partitionsToRead returns the selected partitions among the topic's.
func (f Filter) partitionsToRead(topic string, existing []int32) ([]int32, error) {
	if len(f.Partitions) == 0 {
		return existing, nil
	}
	var out []int32
	for _, p := range f.Partitions {
		if !slices.Contains(existing, p) {
			return nil, fmt.Errorf("partition %d of %s (it has %d): %w", p, topic, len(existing), ErrNoSuchPartition)
		}
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out, nil
}

// offsetRange narrows a partition's [low, high) watermarks to the offsets
// the filter can select. sinceOffset is the first offset whose timestamp is
// at or after Since (sinceFound false: no record is that recent); it is
// ignored when Since is zero.
func (f Filter) offsetRange(partition int32, low, high, sinceOffset int64, sinceFound bool) record.PartitionRange {
	start, end := max(low, f.FromOffset), high
	if f.EndOffset > 0 {
		end = min(end, f.EndOffset)
	}
	if !f.Since.IsZero() {
		if sinceFound {
			start = max(start, sinceOffset)
		} else {
			start = end
		}
	}
	if start > end {
		start = end
	}
	return record.PartitionRange{Partition: partition, Start: start, End: end}
}

// Match reports whether rec, whose dead-letter headers decode to info, is
// selected. It checks every condition, offsets and partitions included,
// so that it is right whatever range was read.
func (f Filter) Match(rec record.Record, info dlq.Info) bool {
	if len(f.Partitions) > 0 && !slices.Contains(f.Partitions, rec.Partition) {
		return false
	}
	if rec.Offset < f.FromOffset || (f.EndOffset > 0 && rec.Offset >= f.EndOffset) {
		return false
	}
	if !f.Since.IsZero() && (rec.Timestamp.IsZero() || rec.Timestamp.Before(f.Since)) {
		return false
	}
	if !f.Until.IsZero() && (rec.Timestamp.IsZero() || !rec.Timestamp.Before(f.Until)) {
		return false
	}
	if f.Category != "" && info.Category != f.Category {
		return false
	}
	if f.FieldPrefix != "" && (info.Field == "" || !strings.HasPrefix(info.Field, f.FieldPrefix)) {
		return false
	}
	return true
}

// categoryList names the valid categories for an error message.
func categoryList() string {
	categories := dlq.Categories()
	names := make([]string, len(categories))
	for i, c := range categories {
		names[i] = string(c)
	}
	return strings.Join(names, ", ")
}

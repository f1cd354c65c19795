package dlqreplay

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/pcp/route-processing/pkg/dlq"
	"github.com/pcp/route-processing/pkg/record"
)

// Usage is the help text of `ingestor dlq-replay`.
const Usage = `usage: ingestor dlq-replay [flags]

Re-publish dead-lettered records from TOPIC_INPUT_DLQ to TOPIC_INPUT (or --to)
with their original key, value and headers (kafka_dlt-* and pcp-error-*
headers dropped); a record sent back to the topic it came from goes to its
original partition when the topic has it. Reads without a consumer group, up to the end of the DLQ as
it is at start, then prints a summary and exits. Exit status 0 when every
selected record was acknowledged, except those held without their value
(or key and headers; counted as omitted=N, with a warning: they cannot be replayed), 1 when a
delivery failed or the DLQ could not be read, 2 on a bad flag or setting.

Selection (all given conditions must hold; DLQ partitions and offsets):
  --partition N[,N...]   DLQ partition(s) to read (repeatable; default all)
  --from-offset N        first DLQ offset, inclusive, in each partition read
  --to-offset N          last DLQ offset, inclusive, in each partition read
  --since TIME           DLQ record timestamp (time of dead-lettering) >= TIME
  --until TIME           DLQ record timestamp < TIME  (TIME: RFC 3339, e.g. 2026-04-28T10:00:00Z)
  --category C           pcp-error-category: CONTRACT, RETRYABLE or FATAL
  --field-prefix P       pcp-error-field starts with P (e.g. data.geometry)

Output:
  --to TOPIC             target topic (default TOPIC_INPUT; not the DLQ nor an output topic)
  --dry-run              list the selected records and send nothing

Environment: KAFKA_BOOTSTRAP_SERVERS (required), KAFKA_PROPERTY_* (librdkafka
properties, e.g. KAFKA_PROPERTY_SECURITY_PROTOCOL=SASL_SSL), TOPIC_INPUT,
TOPIC_INPUT_DLQ, TOPIC_PROCESSED_ROUTE and TOPIC_ROUTE_GEOREFERENCE (refused as
--to), LOG_FORMAT, LOG_LEVEL. DATABASE_URL is not needed.
`

// Options is a parsed dlq-replay command line.
type Options struct {
	// To is the target topic; empty means TOPIC_INPUT.
	To string
	// Filter is the selection.
	Filter Filter
	// DryRun lists and sends nothing.
	DryRun bool
}

// ParseArgs parses the flags after `dlq-replay`. It returns flag.ErrHelp
// for -h/--help, and otherwise a plain error naming the bad flag.
func ParseArgs(args []string) (Options, error) {
	var o Options
	fs := flag.NewFlagSet("dlq-replay", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}

	fs.StringVar(&o.To, "to", "", "")
	fs.BoolVar(&o.DryRun, "dry-run", false, "")
	fs.StringVar(&o.Filter.FieldPrefix, "field-prefix", "", "")
	fs.Func("partition", "", func(s string) error {
		for _, part := range strings.Split(s, ",") {
			p, err := strconv.ParseInt(strings.TrimSpace(part), 10, 32)
			if err != nil || p < 0 {
				return fmt.Errorf("%q is not a partition number", part)
			}
			o.Filter.Partitions = append(o.Filter.Partitions, int32(p))
		}
		return nil
	})
	fs.Func("from-offset", "", func(s string) (err error) {
		o.Filter.FromOffset, err = parseOffset(s)
		return err
	})
	fs.Func("to-offset", "", func(s string) error {
		v, err := parseOffset(s)
		if err != nil {
			return err
		}
		o.Filter.EndOffset = v + 1
		return nil
	})
	fs.Func("since", "", func(s string) (err error) {
		o.Filter.Since, err = parseTime(s)
		return err
	})
	fs.Func("until", "", func(s string) (err error) {
		o.Filter.Until, err = parseTime(s)
		return err
	})
	fs.Func("category", "", func(s string) error {
		c, ok := dlq.ParseCategory(strings.ToUpper(s))
		if !ok {
			return fmt.Errorf("%q is not one of %s", s, categoryList())
		}
		o.Filter.Category = c
		return nil
	})

	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return o, flag.ErrHelp
		}
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if isFlagSet(fs, "to") {
		if err := record.CheckTopicName(o.To); err != nil {
			return o, fmt.Errorf("--to: topic %w", err)
		}
	}
	if err := o.Filter.Validate(); err != nil {
		return o, err
	}
	return o, nil
}

func parseOffset(s string) (int64, error) {
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < 0 || v == 1<<63-1 {
		return 0, fmt.Errorf("%q is not an offset (an integer >= 0)", s)
	}
	return v, nil
}

func parseTime(s string) (time.Time, error) {
	// RFC 3339 lets 'T' and 'Z' be lower case; Go's layout does not.
	t, err := time.Parse(time.RFC3339, strings.ToUpper(s))
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is not an RFC 3339 time (e.g. 2026-04-28T10:00:00Z)", s)
	}
	return t, nil
}

func isFlagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

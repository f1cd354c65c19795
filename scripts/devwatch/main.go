// Command devwatch is the developer's window on the topics of `make run`: it
// produces sample input records and prints what the service made of them,
// one line per record, without ever printing a payload.
//
//	devwatch produce -brokers HOST:PORT [-topic T] [-key K] FILE...
//	devwatch watch   -brokers HOST:PORT [-group-less] [-since-ms MS] [-color auto|always|never]
//
// produce sends each file's content as one record value, keyed by the file's
// base name (or -key); a file whose name contains "traceparent" also gets a
// fresh W3C traceparent header. watch reads the two output topics and the
// dead-letter topic from the beginning (or from -since-ms) without a
// consumer group, and prints each output event (topic, key, routeId,
// geometry type) and each dead-lettered record (reason, field, category)
// until SIGINT or SIGTERM.
//
// It is a development tool: it uses franz-go directly rather than the
// service's librdkafka wrapper, so it builds without cgo and starts at once.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pcp/route-processing/pkg/config"
	"github.com/pcp/route-processing/pkg/dlq"
	"github.com/pcp/route-processing/pkg/record"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "devwatch:", err)
		os.Exit(1)
	}
}

const usage = `usage:
  devwatch produce -brokers HOST:PORT [-topic T] [-key K] FILE...
  devwatch watch   -brokers HOST:PORT [-group-less] [-since-ms MS] [-color auto|always|never]`

func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	if len(args) == 0 {
		return errors.New(usage)
	}
	switch args[0] {
	case "produce":
		return runProduce(ctx, args[1:], getenv, stdout)
	case "watch":
		return runWatch(ctx, args[1:], getenv, stdout)
	}
	if config.IsHelp(args[0]) {
		fmt.Fprintln(stdout, usage)
		return nil
	}
	return fmt.Errorf("unknown subcommand %q\n%s", args[0], usage)
}

// topics are the service's topics. The defaults follow contract §5; the
// service's environment variables override them, so the watcher follows a
// service configured differently.
type topics struct{ input, dlq, processedRoute, routeGeoref string }

func loadTopics(getenv func(string) string) topics {
	or := func(name, def string) string {
		if v := getenv(name); v != "" {
			return v
		}
		return def
	}
	return topics{
		input:          or("TOPIC_INPUT", config.DefaultTopicInput),
		dlq:            or("TOPIC_INPUT_DLQ", config.DefaultTopicInputDLQ),
		processedRoute: or("TOPIC_PROCESSED_ROUTE", config.DefaultTopicProcessedRoute),
		routeGeoref:    or("TOPIC_ROUTE_GEOREFERENCE", config.DefaultTopicRouteGeoreference),
	}
}

func splitBrokers(s string) []string {
	var out []string
	for _, b := range strings.Split(s, ",") {
		if b = strings.TrimSpace(b); b != "" {
			out = append(out, b)
		}
	}
	return out
}

func runProduce(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	fs := flag.NewFlagSet("produce", flag.ContinueOnError)
	brokers := fs.String("brokers", getenv("KAFKA_BOOTSTRAP_SERVERS"), "broker list")
	topic := fs.String("topic", loadTopics(getenv).input, "topic to produce to")
	key := fs.String("key", "", "record key for every file (default: each file's base name)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *brokers == "" {
		return errors.New("produce: -brokers is required")
	}
	if fs.NArg() == 0 {
		return errors.New("produce: no files given")
	}
	var recs []*kgo.Record
	for _, path := range fs.Args() {
		value, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("produce: %w", err)
		}
		name := filepath.Base(path)
		k := name
		if *key != "" {
			k = *key
		}
		r := &kgo.Record{Topic: *topic, Key: []byte(k), Value: value}
		if strings.Contains(name, "traceparent") {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: "traceparent", Value: []byte(newTraceparent())})
		}
		recs = append(recs, r)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(splitBrokers(*brokers)...), kgo.ClientID("devwatch-produce"))
	if err != nil {
		return fmt.Errorf("produce: %w", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	// One record at a time keeps the files' order within a partition and
	// lets the output name the partition and offset of each.
	for i, r := range recs {
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			return fmt.Errorf("produce %s: %w", fs.Arg(i), err)
		}
		extra := ""
		for _, h := range r.Headers {
			extra += fmt.Sprintf(" %s=%s", h.Key, h.Value)
		}
		fmt.Fprintf(stdout, "sent %-40s -> %s p%d@%d (%d bytes, key %q)%s\n",
			filepath.Base(fs.Arg(i)), r.Topic, r.Partition, r.Offset, len(r.Value), r.Key, extra)
	}
	return nil
}

// newTraceparent returns a random, sampled W3C trace context header value.
func newTraceparent() string {
	var b [24]byte
	_, _ = rand.Read(b[:])
	return "00-" + hex.EncodeToString(b[:16]) + "-" + hex.EncodeToString(b[16:]) + "-01"
}

func runWatch(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	fs := flag.NewFlagSet("watch", flag.ContinueOnError)
	brokers := fs.String("brokers", getenv("KAFKA_BOOTSTRAP_SERVERS"), "broker list")
	_ = fs.Bool("group-less", true, "read without a consumer group (the only mode; accepted for clarity)")
	sinceMS := fs.Int64("since-ms", 0, "start at the first record at or after this epoch millisecond (default: from the beginning)")
	color := fs.String("color", "auto", "auto, always or never (auto: when stdout is a terminal and NO_COLOR is unset)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *brokers == "" {
		return errors.New("watch: -brokers is required")
	}
	topic := loadTopics(getenv)
	p := printer{w: stdout, color: useColor(*color, getenv, stdout)}
	for _, name := range []string{topic.processedRoute, topic.routeGeoref, topic.dlq} {
		p.topicWidth = max(p.topicWidth, len(name))
	}
	start := kgo.NewOffset().AtStart()
	if *sinceMS > 0 {
		start = kgo.NewOffset().AfterMilli(*sinceMS)
	}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(splitBrokers(*brokers)...),
		kgo.ClientID("devwatch-watch"),
		kgo.ConsumeTopics(topic.processedRoute, topic.routeGeoref, topic.dlq),
		kgo.ConsumeResetOffset(start),
		kgo.FetchMaxWait(500*time.Millisecond),
		// Topics of an external cluster may appear after the watcher starts.
		kgo.MetadataMinAge(2*time.Second),
	)
	if err != nil {
		return fmt.Errorf("watch: %w", err)
	}
	defer cl.Close()
	p.banner(fmt.Sprintf("watching %s, %s and %s (no consumer group)", topic.processedRoute, topic.routeGeoref, topic.dlq))
	for {
		fetches := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			break
		}
		fetches.EachError(func(t string, part int32, err error) {
			p.warn(fmt.Sprintf("fetch %s p%d: %v", t, part, err))
		})
		fetches.EachRecord(func(r *kgo.Record) {
			if r.Topic == topic.dlq {
				p.dlq(r)
			} else {
				p.output(r)
			}
		})
	}
	p.banner(fmt.Sprintf("watch: %d output events, %d dead-lettered records", p.outputs, p.dlqs))
	return nil
}

func useColor(mode string, getenv func(string) string, w io.Writer) bool {
	switch mode {
	case "always":
		return true
	case "never":
		return false
	}
	if getenv("NO_COLOR") != "" {
		return false
	}
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

type printer struct {
	w             io.Writer
	color         bool
	outputs, dlqs int
	topicWidth    int // pad topic names to align the columns
}

const (
	cReset  = "\033[0m"
	cBold   = "\033[1m"
	cDim    = "\033[2m"
	cRed    = "\033[31m"
	cGreen  = "\033[32m"
	cYellow = "\033[33m"
	cCyan   = "\033[36m"
)

func (p *printer) c(code, s string) string {
	if !p.color {
		return s
	}
	return code + s + cReset
}

func (p *printer) banner(s string) { fmt.Fprintln(p.w, p.c(cDim, s)) }

func (p *printer) warn(s string) { fmt.Fprintln(p.w, p.c(cYellow, "! "+s)) }

// output prints one event of pcp.route.in.v1 or pcp.route.georeference.v1.
func (p *printer) output(r *kgo.Record) {
	p.outputs++
	var v struct {
		Type string `json:"type"`
		Data struct {
			RouteID        string `json:"routeId"`
			RouteNameShort string `json:"routeNameShort"`
			Geometry       string `json:"geometry"`
		} `json:"data"`
	}
	routeID, geom, name := "?", "?", ""
	if err := json.Unmarshal(r.Value, &v); err != nil {
		geom = fmt.Sprintf("unparseable value (%d bytes)", len(r.Value))
	} else {
		routeID, geom, name = v.Data.RouteID, wktType(v.Data.Geometry), v.Data.RouteNameShort
	}
	eventType := header(r, "type")
	if eventType == "" {
		eventType = v.Type
	}
	extra := ""
	if header(r, "traceparent") != "" {
		extra += " " + p.c(cCyan, "traceparent")
	}
	fmt.Fprintf(p.w, "%s %s %s %s key=%s routeId=%s %s %s%s\n",
		p.c(cDim, r.Timestamp.Format("15:04:05.000")),
		p.c(cGreen, "OUT"),
		p.c(cBold, fmt.Sprintf("%-*s", p.topicWidth, r.Topic)),
		p.c(cDim, fmt.Sprintf("p%d@%d", r.Partition, r.Offset)),
		keyOf(r),
		routeID,
		p.c(cBold, geom),
		p.c(cDim, "["+eventType+" "+clip(name, 30)+"]"),
		extra,
	)
}

// dlq prints one record of the dead-letter topic: its original key and
// position, and the headers that say why (contract §4).
func (p *printer) dlq(r *kgo.Record) {
	p.dlqs++
	hs := make([]record.Header, len(r.Headers))
	for i, h := range r.Headers {
		hs[i] = record.Header{Key: h.Key, Value: h.Value}
	}
	info := dlq.Decode(hs)
	field := info.Field
	if field == "" {
		field = "(none)"
	}
	orig := ""
	if info.OriginalOffset >= 0 {
		part := "?"
		if info.OriginalPartition >= 0 {
			part = fmt.Sprint(info.OriginalPartition)
		}
		orig = fmt.Sprintf(" from p%s@%d", part, info.OriginalOffset)
	}
	if info.ValueOmittedBytes > 0 {
		orig += fmt.Sprintf(" (value of %d bytes omitted)", info.ValueOmittedBytes)
	}
	fmt.Fprintf(p.w, "%s %s %s %s key=%s%s category=%s field=%s reason=%q\n",
		p.c(cDim, r.Timestamp.Format("15:04:05.000")),
		p.c(cRed, "DLQ"),
		p.c(cBold, fmt.Sprintf("%-*s", p.topicWidth, r.Topic)),
		p.c(cDim, fmt.Sprintf("p%d@%d", r.Partition, r.Offset)),
		keyOf(r),
		p.c(cDim, orig),
		p.c(cYellow, string(info.Category)),
		p.c(cBold, field),
		clip(info.ExceptionMessage, 200),
	)
}

func headerBytes(r *kgo.Record, key string) []byte {
	for _, h := range r.Headers {
		if h.Key == key {
			return h.Value
		}
	}
	return nil
}

func header(r *kgo.Record, key string) string { return string(headerBytes(r, key)) }

func keyOf(r *kgo.Record) string {
	if r.Key == nil {
		return "(null)"
	}
	return clip(string(r.Key), 40)
}

// wktType returns the geometry type word of a WKT string:
// "POLYGON((30 10,...))" -> "POLYGON".
func wktType(wkt string) string {
	wkt = strings.TrimSpace(wkt)
	if wkt == "" {
		return "NO-GEOMETRY"
	}
	end := strings.IndexAny(wkt, "( ")
	if end < 0 {
		end = len(wkt)
	}
	return strings.ToUpper(clip(wkt[:end], 30))
}

// clip shortens s to at most n runes and makes it printable on one line.
func clip(s string, n int) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "?")
	}
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, s)
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}

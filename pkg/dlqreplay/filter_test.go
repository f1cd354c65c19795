package dlqreplay

import (
	"flag"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pcp/route-processing/pkg/dlq"
	"github.com/pcp/route-processing/pkg/record"
)

var t0 = time.Date(2026, 4, 28, 10, 0, 0, 0, time.UTC)

func TestFilterMatch(t *testing.T) {
	t.Parallel()

	rec := func(p int32, off int64, ts time.Time) record.Record {
		return record.Record{Partition: p, Offset: off, Timestamp: ts}
	}
	contract := dlq.Info{Category: dlq.CategoryContract, Field: "data.geometry.coordinates[0]"}
	tests := []struct {
		name   string
		filter Filter
		rec    record.Record
		info   dlq.Info
		want   bool
	}{
		{name: "zero filter selects all", rec: rec(0, 0, time.Time{}), want: true},
		{name: "zero filter selects records without dead-letter headers", rec: rec(5, 99, t0), info: dlq.Info{}, want: true},

		{name: "partition in set", filter: Filter{Partitions: []int32{1, 2}}, rec: rec(2, 0, t0), want: true},
		{name: "partition not in set", filter: Filter{Partitions: []int32{1, 2}}, rec: rec(0, 0, t0), want: false},

		{name: "from-offset inclusive", filter: Filter{FromOffset: 10}, rec: rec(0, 10, t0), want: true},
		{name: "before from-offset", filter: Filter{FromOffset: 10}, rec: rec(0, 9, t0), want: false},
		{name: "to-offset inclusive", filter: Filter{EndOffset: 21}, rec: rec(0, 20, t0), want: true},
		{name: "after to-offset", filter: Filter{EndOffset: 21}, rec: rec(0, 21, t0), want: false},
		{name: "single offset", filter: Filter{FromOffset: 7, EndOffset: 8}, rec: rec(0, 7, t0), want: true},

		{name: "since inclusive", filter: Filter{Since: t0}, rec: rec(0, 0, t0), want: true},
		{name: "before since", filter: Filter{Since: t0}, rec: rec(0, 0, t0.Add(-time.Millisecond)), want: false},
		{name: "until exclusive", filter: Filter{Until: t0}, rec: rec(0, 0, t0), want: false},
		{name: "before until", filter: Filter{Until: t0}, rec: rec(0, 0, t0.Add(-time.Millisecond)), want: true},
		{name: "no timestamp with since", filter: Filter{Since: t0}, rec: rec(0, 0, time.Time{}), want: false},
		{name: "no timestamp with until", filter: Filter{Until: t0}, rec: rec(0, 0, time.Time{}), want: false},
		{name: "since compares the DLQ timestamp, not the original one", filter: Filter{Since: t0},
			rec: rec(0, 0, t0.Add(time.Hour)), info: dlq.Info{OriginalTimestamp: t0.Add(-time.Hour)}, want: true},

		{name: "category equal", filter: Filter{Category: dlq.CategoryContract}, rec: rec(0, 0, t0), info: contract, want: true},
		{name: "category different", filter: Filter{Category: dlq.CategoryRetryable}, rec: rec(0, 0, t0), info: contract, want: false},
		{name: "category absent", filter: Filter{Category: dlq.CategoryContract}, rec: rec(0, 0, t0), info: dlq.Info{}, want: false},
		{name: "category compared exactly", filter: Filter{Category: dlq.CategoryContract}, rec: rec(0, 0, t0), info: dlq.Info{Category: "contract"}, want: false},

		{name: "field prefix", filter: Filter{FieldPrefix: "data.geometry"}, rec: rec(0, 0, t0), info: contract, want: true},
		{name: "field whole", filter: Filter{FieldPrefix: "data.geometry.coordinates[0]"}, rec: rec(0, 0, t0), info: contract, want: true},
		{name: "field other", filter: Filter{FieldPrefix: "data.properties"}, rec: rec(0, 0, t0), info: contract, want: false},
		{name: "field absent", filter: Filter{FieldPrefix: "data"}, rec: rec(0, 0, t0), info: dlq.Info{Category: dlq.CategoryContract}, want: false},

		{name: "all conditions hold", filter: Filter{Partitions: []int32{1}, FromOffset: 5, EndOffset: 6, Since: t0, Until: t0.Add(time.Hour), Category: dlq.CategoryContract, FieldPrefix: "data."},
			rec: rec(1, 5, t0.Add(time.Minute)), info: contract, want: true},
		{name: "one condition fails", filter: Filter{Partitions: []int32{1}, FromOffset: 5, EndOffset: 6, Since: t0, Until: t0.Add(time.Hour), Category: dlq.CategoryContract, FieldPrefix: "data."},
			rec: rec(1, 5, t0.Add(time.Hour)), info: contract, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, tt.filter.Match(tt.rec, tt.info))
		})
	}
}

func TestFilterOffsetRange(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name        string
		filter      Filter
		low, high   int64
		sinceOffset int64
		sinceFound  bool
		wantStart   int64
		wantEnd     int64
	}{
		{name: "whole log", low: 3, high: 10, wantStart: 3, wantEnd: 10},
		{name: "empty log", low: 10, high: 10, wantStart: 10, wantEnd: 10},
		{name: "from-offset inside", filter: Filter{FromOffset: 5}, low: 3, high: 10, wantStart: 5, wantEnd: 10},
		{name: "from-offset below log start", filter: Filter{FromOffset: 1}, low: 3, high: 10, wantStart: 3, wantEnd: 10},
		{name: "from-offset past the end", filter: Filter{FromOffset: 50}, low: 3, high: 10, wantStart: 10, wantEnd: 10},
		{name: "to-offset inside", filter: Filter{EndOffset: 8}, low: 3, high: 10, wantStart: 3, wantEnd: 8},
		{name: "to-offset past the end stops at the high watermark", filter: Filter{EndOffset: 80}, low: 3, high: 10, wantStart: 3, wantEnd: 10},
		{name: "to-offset below log start", filter: Filter{EndOffset: 2}, low: 3, high: 10, wantStart: 2, wantEnd: 2},
		{name: "since seeks", filter: Filter{Since: t0}, low: 3, high: 10, sinceOffset: 6, sinceFound: true, wantStart: 6, wantEnd: 10},
		{name: "since with from-offset: the later wins", filter: Filter{Since: t0, FromOffset: 8}, low: 3, high: 10, sinceOffset: 6, sinceFound: true, wantStart: 8, wantEnd: 10},
		{name: "since later than every record", filter: Filter{Since: t0}, low: 3, high: 10, sinceFound: false, wantStart: 10, wantEnd: 10},
		{name: "since offset ignored without since", low: 3, high: 10, sinceOffset: 6, sinceFound: true, wantStart: 3, wantEnd: 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := tt.filter.offsetRange(4, tt.low, tt.high, tt.sinceOffset, tt.sinceFound)
			require.Equal(t, record.PartitionRange{Partition: 4, Start: tt.wantStart, End: tt.wantEnd}, got)
		})
	}
}

func TestFilterPartitionsToRead(t *testing.T) {
	t.Parallel()

	got, err := Filter{}.partitionsToRead("dlq", []int32{0, 1, 2})
	require.NoError(t, err)
	require.Equal(t, []int32{0, 1, 2}, got)

	got, err = Filter{Partitions: []int32{2, 0, 2}}.partitionsToRead("dlq", []int32{0, 1, 2})
	require.NoError(t, err)
	require.Equal(t, []int32{0, 2}, got)

	_, err = Filter{Partitions: []int32{3}}.partitionsToRead("dlq", []int32{0, 1, 2})
	require.ErrorIs(t, err, ErrNoSuchPartition)
}

func TestParseArgs(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name    string
		args    []string
		want    Options
		wantErr string
	}{
		{name: "no flags", args: nil, want: Options{}},
		{
			name: "every flag",
			args: []string{
				"--partition", "2", "--partition=0,1", "--from-offset", "5", "--to-offset=9",
				"--since", "2026-04-28T10:00:00Z", "--until", "2026-04-28T12:00:00.5+02:00",
				"--category", "contract", "--field-prefix", "data.geometry", "--to", "other", "--dry-run",
			},
			want: Options{
				To:     "other",
				DryRun: true,
				Filter: Filter{
					Partitions:  []int32{2, 0, 1},
					FromOffset:  5,
					EndOffset:   10,
					Since:       t0,
					Until:       time.Date(2026, 4, 28, 10, 0, 0, 5e8, time.UTC),
					Category:    dlq.CategoryContract,
					FieldPrefix: "data.geometry",
				},
			},
		},
		{name: "single dash works too", args: []string{"-to-offset", "0"}, want: Options{Filter: Filter{EndOffset: 1}}},
		{name: "lower-case t and z (RFC 3339 allows them)", args: []string{"--since", "2026-04-28t10:00:00z"}, want: Options{Filter: Filter{Since: t0}}},
		{name: "from equals to", args: []string{"--from-offset", "4", "--to-offset", "4"}, want: Options{Filter: Filter{FromOffset: 4, EndOffset: 5}}},
		{name: "to before from", args: []string{"--from-offset", "5", "--to-offset", "4"}, wantErr: "to-offset 4 is before from-offset 5"},
		{name: "negative offset", args: []string{"--from-offset", "-1"}, wantErr: "is not an offset"},
		{name: "offset not a number", args: []string{"--to-offset", "ten"}, wantErr: "is not an offset"},
		{name: "negative partition", args: []string{"--partition", "-1"}, wantErr: "is not a partition number"},
		{name: "bad partition list", args: []string{"--partition", "1,,2"}, wantErr: "is not a partition number"},
		{name: "bad time", args: []string{"--since", "2026-04-28"}, wantErr: "is not an RFC 3339 time"},
		{name: "until before since", args: []string{"--since", "2026-04-28T10:00:00Z", "--until", "2026-04-28T10:00:00Z"}, wantErr: "is not after since"},
		{name: "bad category", args: []string{"--category", "POISON"}, wantErr: `"POISON" is not one of CONTRACT, RETRYABLE, FATAL`},
		{name: "unknown flag", args: []string{"--topic", "x"}, wantErr: "flag provided but not defined: -topic"},
		{name: "positional argument", args: []string{"--dry-run", "extra"}, wantErr: `unexpected argument "extra"`},
		{name: "empty target", args: []string{"--to", ""}, wantErr: "--to: topic is empty"},
		{name: "target Kafka would refuse", args: []string{"--to", "bad topic/x"}, wantErr: "--to: topic \"bad topic/x\" has a character Kafka does not allow"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseArgs(tt.args)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.True(t, got.Filter.Since.Equal(tt.want.Filter.Since), "since %s", got.Filter.Since)
			require.True(t, got.Filter.Until.Equal(tt.want.Filter.Until), "until %s", got.Filter.Until)
			got.Filter.Since, got.Filter.Until = tt.want.Filter.Since, tt.want.Filter.Until
			require.Equal(t, tt.want, got)
		})
	}

	t.Run("help", func(t *testing.T) {
		t.Parallel()
		for _, a := range []string{"-h", "--help", "-help"} {
			_, err := ParseArgs([]string{a})
			require.ErrorIs(t, err, flag.ErrHelp, a)
		}
	})
}

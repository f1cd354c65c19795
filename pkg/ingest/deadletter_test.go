package ingest_test

import (
	"context"
	"crypto/rand"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pcp/route-processing/pkg/dlq"
	"github.com/pcp/route-processing/pkg/testenv"
)

// A record that the DLQ topic refuses as too large must not block its
// partition: it is dead-lettered without its value, with a header giving
// the value's size, and its neighbour in the same produce request goes
// through whole.
func TestDLQTooLargeIsDeadLetteredWithoutValue(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, "")
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.bootstrap))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	limit := "2048"
	_, err = kadm.NewClient(cl).AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "max.message.bytes", Value: &limit}}, b.dlqTopic)
	require.NoError(t, err)

	big := make([]byte, 8000) // random, so compression cannot shrink it under the limit
	_, _ = rand.Read(big)
	testenv.Produce(t, b.bootstrap, b.topic,
		testenv.Record{Key: []byte("big"), Value: big},
		testenv.Record{Key: []byte("small"), Value: []byte(`{"x":1}`)},
	)
	r := b.start(t)

	recs := testenv.Consume(t, b.bootstrap, b.dlqTopic, 2, 30*time.Second)
	byKey := map[string]testenv.Record{}
	for _, rec := range recs {
		byKey[string(rec.Key)] = rec
	}
	require.Empty(t, byKey["big"].Value)
	size, ok := byKey["big"].Header(dlq.HeaderValueOmitted)
	require.True(t, ok, "omitted-value header present")
	require.Equal(t, "8000", size)
	cat, _ := byKey["big"].Header(dlq.HeaderErrorCategory)
	require.Equal(t, string(dlq.CategoryContract), cat, "the DLQ headers are kept")
	require.Equal(t, `{"x":1}`, string(byKey["small"].Value))
	require.NoError(t, r.stop(t))
}

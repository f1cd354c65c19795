package adapters_test

import (
	"context"
	"crypto/rand"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pcp/route-processing/pkg/ingest"
	"github.com/pcp/route-processing/pkg/ingest/adapters"
	"github.com/pcp/route-processing/pkg/kafkax"
	"github.com/pcp/route-processing/pkg/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// A record that the DLQ topic refuses as too large must not block its
// partition: it is dead-lettered without its value, with a header giving the
// value's size.
func TestDLQTooLargeIsDeadLetteredWithoutValue(t *testing.T) {
	t.Parallel()
	bootstrap := testenv.KafkaBootstrap(t)
	dlqTopic := testenv.Topic(t, "dlq-small", 1)

	cl, err := kgo.NewClient(kgo.SeedBrokers(bootstrap))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	limit := "2048"
	_, err = kadm.NewClient(cl).AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "max.message.bytes", Value: &limit}}, dlqTopic)
	require.NoError(t, err)

	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	p, err := kafkax.NewProducer(logger, kafkax.ProducerConfig{
		ClientConfig:    kafkax.ClientConfig{BootstrapServers: bootstrap},
		DeliveryTimeout: 20 * time.Second,
	})
	require.NoError(t, err)
	defer p.Close(time.Second)

	big := make([]byte, 8000) // random, so compression cannot shrink it under the limit
	_, _ = rand.Read(big)
	dlq := adapters.DLQ{P: p, Topic: dlqTopic}
	errs := dlq.Produce(ctx, []ingest.DLQMessage{
		{Key: []byte("big"), Value: big, Headers: []ingest.Header{{Key: "pcp-error-category", Value: []byte("CONTRACT")}}},
		{Key: []byte("small"), Value: []byte(`{"x":1}`)},
	})
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])

	recs := testenv.Consume(t, bootstrap, dlqTopic, 2, 30*time.Second)
	byKey := map[string]testenv.Record{}
	for _, r := range recs {
		byKey[string(r.Key)] = r
	}
	require.Empty(t, byKey["big"].Value)
	size, ok := byKey["big"].Header(adapters.HeaderValueOmitted)
	require.True(t, ok, "omitted-value header present")
	require.Equal(t, "8000", size)
	cat, _ := byKey["big"].Header("pcp-error-category")
	require.Equal(t, "CONTRACT", cat, "the DLQ headers are kept")
	require.Equal(t, `{"x":1}`, string(byKey["small"].Value))
}

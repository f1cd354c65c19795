package kafkax

import (
	"bytes"
	"log/slog"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/stretchr/testify/require"
)

// secret is every operator value in these tests: values may be secrets, so
// it must never appear in the log.
const secret = "s3cret-value"

// buildConfig runs configMap with the operator's properties and returns the
// configuration and what it logged.
func buildConfig(props map[string]string, defaults, enforced kafka.ConfigMap) (kafka.ConfigMap, string) {
	var log bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&log, nil))
	m := configMap(logger, ClientConfig{BootstrapServers: "broker:9092", Properties: props}, defaults, enforced)
	return m, log.String()
}

func TestConfigMapKeepsEnforcedSettingsUnderAnyName(t *testing.T) {
	t.Parallel()
	producer := producerEnforced(ProducerConfig{DeliveryTimeout: 30 * time.Second})
	consumer := consumerEnforced(ConsumerConfig{GroupID: "g", Topic: "t"})
	reader := readerEnforced(ReaderConfig{GroupID: "r"})
	type tc struct {
		enforced  kafka.ConfigMap
		property  string // as the operator writes it
		canonical string // as enforced names it
	}
	// librdkafka 2.11.1's aliases of enforced settings, and "topic." names
	// of the topic-level ones (librdkafka sets "topic.acks" as acks). The
	// consumer's enforced settings have no alias.
	cases := []tc{
		{producer, "request.required.acks", "acks"},
		{producer, "topic.acks", "acks"},
		{producer, "topic.request.required.acks", "acks"},
		{producer, "delivery.timeout.ms", "message.timeout.ms"},
		{producer, "topic.delivery.timeout.ms", "message.timeout.ms"},
		{producer, "topic.message.timeout.ms", "message.timeout.ms"},
		{producer, "max.in.flight", "max.in.flight.requests.per.connection"},
		{reader, "topic.auto.offset.reset", "auto.offset.reset"},
	}
	// Under their own names too.
	for _, enforced := range []kafka.ConfigMap{producer, consumer, reader} {
		for k := range enforced {
			cases = append(cases, tc{enforced, k, k})
		}
	}
	for _, c := range cases {
		t.Run(c.property, func(t *testing.T) {
			m, log := buildConfig(map[string]string{c.property: secret}, nil, c.enforced)
			require.Equal(t, c.enforced[c.canonical], m[c.canonical])
			if c.property != c.canonical {
				require.NotContains(t, m, c.property)
			}
			require.Contains(t, log, "property="+c.property)
			require.NotContains(t, log, secret)
		})
	}
}

func TestConfigMapStoresAliasUnderCanonicalName(t *testing.T) {
	t.Parallel()
	defaults := kafka.ConfigMap{"linger.ms": 5, "compression.type": Compression, "auto.offset.reset": "earliest"}
	m, log := buildConfig(map[string]string{
		"queue.buffering.max.ms":  "20",
		"compression.codec":       "zstd",
		"topic.auto.offset.reset": "latest",
	}, defaults, nil)
	require.Equal(t, "20", m["linger.ms"])
	require.Equal(t, "zstd", m["compression.type"])
	require.Equal(t, "latest", m["auto.offset.reset"])
	for _, alias := range []string{"queue.buffering.max.ms", "compression.codec", "topic.auto.offset.reset"} {
		require.NotContains(t, m, alias)
	}
	require.Empty(t, log)
}

func TestConfigMapPrefersCanonicalNameOverAlias(t *testing.T) {
	t.Parallel()
	// The alias sorts after its canonical name in the first pair, before it
	// in the second: neither the order of the keys nor of the map decides.
	m, log := buildConfig(map[string]string{
		"linger.ms":              "20",
		"queue.buffering.max.ms": secret,
		"compression.type":       "lz4",
		"compression.codec":      secret,
	}, nil, nil)
	require.Equal(t, "20", m["linger.ms"])
	require.Equal(t, "lz4", m["compression.type"])
	require.NotContains(t, m, "queue.buffering.max.ms")
	require.NotContains(t, m, "compression.codec")
	require.Contains(t, log, "property=queue.buffering.max.ms")
	require.Contains(t, log, "property=compression.codec")
	require.NotContains(t, log, secret)
}

func TestConfigMapRefusesTransactionalID(t *testing.T) {
	t.Parallel()
	m, log := buildConfig(map[string]string{"transactional.id": secret}, nil,
		producerEnforced(ProducerConfig{DeliveryTimeout: 30 * time.Second}))
	require.NotContains(t, m, "transactional.id")
	require.Contains(t, log, "property=transactional.id")
	require.NotContains(t, log, secret)
}

// The broker list is the one given as KAFKA_BOOTSTRAP_SERVERS (checked when
// read), under whatever name a property would replace it.
func TestConfigMapKeepsTheBootstrapServers(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"bootstrap.servers", "metadata.broker.list"} {
		m, log := buildConfig(map[string]string{name: secret}, nil, consumerEnforced(ConsumerConfig{GroupID: "g", Topic: "t"}))
		require.Equal(t, "broker:9092", m["bootstrap.servers"], name)
		require.NotContains(t, m, "metadata.broker.list")
		require.Contains(t, log, "property="+name)
		require.NotContains(t, log, secret)
	}
}

// namedProperty finds the property in librdkafka's refusals (their real
// texts), under every name it can be set by, so that the mains can name
// the operator's variable.
func TestNamedProperty(t *testing.T) {
	t.Parallel()
	for msg, want := range map[string][]string{
		`Configuration property "queue.buffering.max.ms" value -5 is outside allowed range 0..900000`: {"linger.ms", "queue.buffering.max.ms"},
		`No such configuration property: "foo.bar"`:                                                   {"foo.bar"},
		`ssl.certificate.location failed: error:0A080002:SSL routines::system lib`:                    {"ssl.certificate.location"},
		`Expected bool value for "socket.keepalive.enable": true or false`:                            {"socket.keepalive.enable"},
		`Invalid value for configuration property "sasl.mechanism"`:                                   {"sasl.mechanism", "sasl.mechanisms"},
		`Invalid value "bogus" for configuration property "debug"`:                                    {"debug"},
		`Unsupported value "linger.ms" for configuration property "compression.codec": not built in`:  {"compression.codec", "compression.type"},
		`Java JAAS configuration is not supported`:                                                    nil,
	} {
		require.Equal(t, want, namedProperty(msg), msg)
	}
}

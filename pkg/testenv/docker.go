package testenv

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/ory/dockertest/v3"
	dc "github.com/ory/dockertest/v3/docker"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// EnvNoDocker, set to any non-empty value, makes the package ignore a Docker
// daemon and go straight to local binaries / in-process Kafka.
const EnvNoDocker = "TESTENV_NO_DOCKER"

var docker struct {
	once sync.Once
	pool *dockertest.Pool
}

// dockerPool returns a pool when a Docker daemon answers, else nil.
func dockerPool() *dockertest.Pool {
	docker.once.Do(func() {
		if os.Getenv(EnvNoDocker) != "" {
			return
		}
		pool, err := dockertest.NewPool("")
		if err != nil {
			return
		}
		if err := pool.Client.Ping(); err != nil {
			return
		}
		pool.MaxWait = 2 * time.Minute
		docker.pool = pool
	})
	return docker.pool
}

// runContainer starts a container that is removed at Main's teardown, or by
// the reaper if the binary dies first.
func runContainer(pool *dockertest.Pool, opts *dockertest.RunOptions) (*dockertest.Resource, error) {
	if opts.Labels == nil {
		opts.Labels = map[string]string{}
	}
	opts.Labels["testenv"] = "github.com/pcp/route-processing/pkg/testenv"
	res, err := pool.RunWithOptions(opts, func(hc *dc.HostConfig) {
		hc.AutoRemove = true
		hc.RestartPolicy = dc.RestartPolicy{Name: "no"}
	})
	if err != nil {
		return nil, err
	}
	unreap := reapOnCrash(reapStep{Container: res.Container.ID})
	atTeardown(func() {
		_ = pool.Purge(res)
		unreap()
	})
	return res, nil
}

func dockerPostgres(pool *dockertest.Pool) (string, error) {
	res, err := runContainer(pool, &dockertest.RunOptions{
		Repository: "postgres",
		Tag:        "15",
		Env:        []string{"POSTGRES_PASSWORD=postgres", "POSTGRES_HOST_AUTH_METHOD=trust"},
		Cmd: []string{"postgres",
			"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
			"-c", "max_connections=300", "-c", "shared_buffers=128MB"},
	})
	if err != nil {
		return "", err
	}
	u := fmt.Sprintf("postgres://postgres:postgres@%s/postgres?sslmode=disable", res.GetHostPort("5432/tcp"))
	err = pool.Retry(func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, u)
		if err != nil {
			return err
		}
		return conn.Close(ctx)
	})
	if err != nil {
		return "", fmt.Errorf("wait for postgres: %w", err)
	}
	return u, nil
}

// dockerKafka runs a single-node KRaft apache/kafka. The host port is chosen
// up front because Kafka must advertise the very address clients dial.
func dockerKafka(pool *dockertest.Pool) (string, error) {
	port, err := freePort()
	if err != nil {
		return "", err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	_, err = runContainer(pool, &dockertest.RunOptions{
		Repository: "apache/kafka",
		Tag:        "3.9.1",
		Env: []string{
			"KAFKA_NODE_ID=1",
			"KAFKA_PROCESS_ROLES=broker,controller",
			"KAFKA_LISTENERS=PLAINTEXT://:9092,CONTROLLER://:9093",
			"KAFKA_ADVERTISED_LISTENERS=PLAINTEXT://" + addr,
			"KAFKA_CONTROLLER_LISTENER_NAMES=CONTROLLER",
			"KAFKA_LISTENER_SECURITY_PROTOCOL_MAP=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
			"KAFKA_CONTROLLER_QUORUM_VOTERS=1@localhost:9093",
			"KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR=1",
			"KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR=1",
			"KAFKA_TRANSACTION_STATE_LOG_MIN_ISR=1",
			"KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS=0",
			"KAFKA_NUM_PARTITIONS=3",
			"KAFKA_AUTO_CREATE_TOPICS_ENABLE=true",
		},
		ExposedPorts: []string{"9092/tcp"},
		PortBindings: map[dc.Port][]dc.PortBinding{
			"9092/tcp": {{HostIP: "127.0.0.1", HostPort: strconv.Itoa(port)}},
		},
	})
	if err != nil {
		return "", err
	}
	err = pool.Retry(func() error {
		cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
		if err != nil {
			return err
		}
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err = kadm.NewClient(cl).ListBrokers(ctx)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("wait for kafka: %w", err)
	}
	return addr, nil
}

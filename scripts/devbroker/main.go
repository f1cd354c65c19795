// Command devbroker is a Kafka-compatible broker for development and tests:
// kfake (github.com/twmb/franz-go/pkg/kfake) behind a few flags. It needs no
// JVM and no Docker, starts in milliseconds, auto-creates topics on produce,
// and keeps everything in memory — SIGSTOP/SIGCONT freeze and thaw it with
// its data, a restart forgets it.
//
// `make run` uses it as the local broker, and pkg/testenv.BrokerProcess runs
// it as a child process so that resilience tests can pause a broker without
// disturbing the other tests.
//
//	devbroker -addr 127.0.0.1:9092 -partitions 3 -topics a,b -ready-file /tmp/ready
//
// -retention drops records older than it, as a real broker's retention.ms
// does (checked every tenth of it, at most every minute); without it
// everything is kept, and a long soak grows the broker's memory with every
// record it ever took. A consumer that falls behind it loses what was
// dropped, as it would on a real broker.
//
// Every flag may also come from the environment: DEVBROKER_ADDR,
// DEVBROKER_PARTITIONS, DEVBROKER_TOPICS, DEVBROKER_READY_FILE,
// DEVBROKER_RETENTION. The broker
// advertises the address it listens on, so listen on the address clients
// dial (127.0.0.1 by default, not a wildcard).
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv); err != nil {
		fmt.Fprintln(os.Stderr, "devbroker:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, getenv func(string) string) error {
	fs := flag.NewFlagSet("devbroker", flag.ContinueOnError)
	addr := fs.String("addr", cmp.Or(getenv("DEVBROKER_ADDR"), "127.0.0.1:9092"), "listen address host:port (port 0 picks a free one); also the advertised address")
	partitions := fs.Int("partitions", envInt(getenv, "DEVBROKER_PARTITIONS", 3), "partitions of auto-created and -topics topics")
	topics := fs.String("topics", getenv("DEVBROKER_TOPICS"), "comma-separated topics to create at start")
	readyFile := fs.String("ready-file", getenv("DEVBROKER_READY_FILE"), "write the listen address to this file once listening")
	retention := fs.Duration("retention", 0, "drop records older than this (0: keep everything); also DEVBROKER_RETENTION")
	if v := getenv("DEVBROKER_RETENTION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("DEVBROKER_RETENTION %q: %w", v, err)
		}
		*retention = d
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *retention < 0 {
		return errors.New("-retention must not be negative")
	}
	host, portStr, err := net.SplitHostPort(*addr)
	if err != nil {
		return fmt.Errorf("-addr %q: %w", *addr, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return fmt.Errorf("-addr %q: bad port", *addr)
	}
	if *partitions < 1 {
		return errors.New("-partitions must be at least 1")
	}
	var seed []string
	for _, t := range strings.Split(*topics, ",") {
		if t = strings.TrimSpace(t); t != "" {
			seed = append(seed, t)
		}
	}

	opts := []kfake.Opt{
		// One broker: it is the leader of every partition and the
		// coordinator of every group, so clients only ever dial -addr.
		kfake.NumBrokers(1),
		kfake.Ports(port),
		// kfake listens on 127.0.0.1; honour the host of -addr instead.
		kfake.ListenFn(func(network, a string) (net.Listener, error) {
			_, p, _ := net.SplitHostPort(a)
			return net.Listen(network, net.JoinHostPort(host, p))
		}),
		kfake.AllowAutoTopicCreation(),
		kfake.DefaultNumPartitions(*partitions),
	}
	if len(seed) > 0 {
		opts = append(opts, kfake.SeedTopics(int32(*partitions), seed...))
	}
	if *retention > 0 {
		opts = append(opts, kfake.BrokerConfigs(map[string]string{
			"log.retention.ms": strconv.FormatInt(retention.Milliseconds(), 10),
		}))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return fmt.Errorf("start broker: %w", err)
	}
	defer c.Close()
	listen := c.ListenAddrs()[0]

	if *readyFile != "" {
		// Write then rename, so a reader never sees a half-written address.
		tmp := filepath.Join(filepath.Dir(*readyFile), "."+filepath.Base(*readyFile)+".tmp")
		if err := os.WriteFile(tmp, []byte(listen+"\n"), 0o644); err != nil {
			return fmt.Errorf("ready file: %w", err)
		}
		if err := os.Rename(tmp, *readyFile); err != nil {
			return fmt.Errorf("ready file: %w", err)
		}
	}
	fmt.Fprintf(os.Stderr, "devbroker: listening on %s (pid %d, partitions %d, topics %q, retention %s)\n", listen, os.Getpid(), *partitions, seed, *retention)
	if *retention > 0 {
		go applyRetention(ctx, c, min(*retention/10, time.Minute))
	}
	<-ctx.Done()
	return nil
}

// applyRetention drops expired records every interval until ctx ends: kfake
// applies retention.ms only when asked to (or on a ticker it starts for
// topics that set it themselves, which auto-created topics do not).
func applyRetention(ctx context.Context, c *kfake.Cluster, interval time.Duration) {
	t := time.NewTicker(max(interval, 100*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			c.ApplyRetention()
		}
	}
}

func envInt(getenv func(string) string, key string, def int) int {
	if v, err := strconv.Atoi(getenv(key)); err == nil {
		return v
	}
	return def
}

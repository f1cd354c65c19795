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
// -brokers N runs N brokers in one process, the first on -addr, the others
// on free ports of its host; partition leaders and group coordinators are
// spread over them. SIGUSR1 then moves them: each partition's leader and
// each group's coordinator is drawn again at random among the brokers
// (kfake's shuffle: with three, about two of three move), as a rolling restart or
// a leader election does to a real cluster, and clients must follow
// (NOT_LEADER_OR_FOLLOWER, NOT_COORDINATOR).
//
// Every flag may also come from the environment: DEVBROKER_ADDR,
// DEVBROKER_PARTITIONS, DEVBROKER_TOPICS, DEVBROKER_READY_FILE,
// DEVBROKER_RETENTION, DEVBROKER_BROKERS. The broker
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
	brokers := fs.Int("brokers", envInt(getenv, "DEVBROKER_BROKERS", 1), "brokers in the cluster; SIGUSR1 moves partition leaders and group coordinators among them")
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
	if *brokers < 1 {
		return errors.New("-brokers must be at least 1")
	}
	ports := make([]int, *brokers) // the others: free ports
	ports[0] = port
	var seed []string
	for _, t := range strings.Split(*topics, ",") {
		if t = strings.TrimSpace(t); t != "" {
			seed = append(seed, t)
		}
	}

	opts := []kfake.Opt{
		// With one broker (the default) it leads every partition and
		// coordinates every group, so clients only ever dial -addr.
		kfake.NumBrokers(*brokers),
		kfake.Ports(ports...),
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
	// kfake keeps each partition's log in in-memory segment files that
	// grow by doubling, on the goroutine that serves every request: at its
	// default segment.bytes (100 MiB) the append that grew a segment from
	// 64 to 128 MiB (a fresh allocation and a copy) held every client for
	// 150–200 ms, minutes into a soak. Small segments bound that copy.
	configs := map[string]string{"log.segment.bytes": strconv.Itoa(segmentBytes)}
	if *retention > 0 {
		configs["log.retention.ms"] = strconv.FormatInt(retention.Milliseconds(), 10)
	}
	opts = append(opts, kfake.BrokerConfigs(configs))
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return fmt.Errorf("start broker: %w", err)
	}
	defer c.Close()
	listen := c.ListenAddrs()[0]
	// Before the ready file: SIGUSR1's default action ends the process.
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	defer signal.Stop(usr1)

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
	fmt.Fprintf(os.Stderr, "devbroker: listening on %s (pid %d, brokers %d, partitions %d, topics %q, retention %s)\n", strings.Join(c.ListenAddrs(), ","), os.Getpid(), *brokers, *partitions, seed, *retention)
	if *retention > 0 {
		go applyRetention(ctx, c, min(*retention/10, time.Minute))
	}
	moveLeaders(ctx, c, usr1)
	return nil
}

// moveLeaders draws every partition's leader and every group's coordinator
// again on each value of usr1 (SIGUSR1), until ctx ends.
func moveLeaders(ctx context.Context, c *kfake.Cluster, usr1 <-chan os.Signal) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-usr1:
			c.ShufflePartitionLeaders()
			c.RehashCoordinators()
			fmt.Fprintln(os.Stderr, "devbroker: partition leaders and group coordinators drawn again")
		}
	}
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

// segmentBytes is the size at which a partition's segment rolls: about a
// second of one partition's records in a soak at 1,000 passports/s.
const segmentBytes = 1 << 20

func envInt(getenv func(string) string, key string, def int) int {
	if v, err := strconv.Atoi(getenv(key)); err == nil {
		return v
	}
	return def
}

package testenv

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// LinkFault is how TwoBrokers cuts the link to broker 1.
type LinkFault int

const (
	// DropRequests closes the connection of each request broker 1
	// receives: a link that resets.
	DropRequests LinkFault = iota
	// HoldRequests leaves each request broker 1 receives unanswered, its
	// connection up, until the cut ends: a link that drops packets
	// without a reset (a frozen host, a firewall that drops), as far as a
	// client can tell before its own request timeout.
	HoldRequests
)

// TwoBrokers starts a kfake cluster of t's own with brokers 0 and 1 and
// the topics of leaders (one partition each, led by the broker given), and
// returns its bootstrap list, a consumer group whose coordinator is broker
// coordinator, and a switch that cuts broker 1 off by fault while broker 0
// answers: the link to one broker cut.
func TwoBrokers(t testing.TB, leaders map[string]int32, coordinator int32, fault LinkFault) (bootstrap, group string, cut *atomic.Bool) {
	t.Helper()
	topics := make([]string, 0, len(leaders))
	for topic := range leaders {
		topics = append(topics, topic)
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(2), kfake.Ports(0, 0), kfake.SeedTopics(1, topics...))
	if err != nil {
		t.Fatalf("testenv: two brokers: %v", err)
	}
	t.Cleanup(c.Close)
	for topic, leader := range leaders {
		if err := c.MoveTopicPartition(topic, 0, leader); err != nil {
			t.Fatalf("testenv: two brokers: lead %s from broker %d: %v", topic, leader, err)
		}
	}
	for i := 0; ; i++ {
		if group = fmt.Sprintf("two-brokers-%d", i); c.CoordinatorFor(group) == coordinator {
			break
		}
	}
	cut = &atomic.Bool{}
	c.Control(func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if !cut.Load() || c.CurrentNode() != 1 {
			return nil, nil, false
		}
		if fault == DropRequests {
			return nil, errors.New("broker 1 cut off"), true
		}
		// Other connections' requests run meanwhile; this one is
		// answered once the cut ends, as a link that comes back
		// delivers what it held.
		c.SleepControl(func() {
			for cut.Load() {
				time.Sleep(50 * time.Millisecond)
			}
		})
		return nil, nil, false
	})
	return strings.Join(c.ListenAddrs(), ","), group, cut
}

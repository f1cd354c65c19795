package kafkax

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/pcp/route-processing/pkg/record"
)

// The metadata probes ask whether any broker answers. A client needs more:
// the consumer its group's coordinator and the leaders of its partitions,
// the producer the leaders of the partitions it produces to. When the
// broker that answers the probe is not one of those (the link to one
// broker drops every packet, or the coordinator is not available), the
// probe passes while nothing is consumed or published. librdkafka's
// statistics say what each client has of the brokers it needs; linkHealth
// reads them.

// statsInterval is how often librdkafka emits its statistics
// (statistics.interval.ms; an operator may change it, 0 turns the check
// off). A few kilobytes of JSON a second is nothing to parse.
const statsInterval = time.Second

// linkGrace is how long a problem lasts before it is reported: a leader
// election or a coordinator's move takes seconds, and readiness should
// not come and go with each.
const linkGrace = 10 * time.Second

// linkHealth keeps, from a client's statistics, what it needs of the
// cluster and has lacked for linkGrace.
type linkHealth struct {
	// topic is the consumer's topic, whose assigned partitions' brokers
	// it needs; "" for a producer, which needs the leaders of the
	// partitions it has produced to within needFor (a record waits for
	// its leader up to the delivery timeout, and the relay sends a
	// postponed row again a moment after; linkGrace when 0).
	topic   string
	needFor time.Duration

	mu       sync.Mutex
	problems map[string]*linkProblem // by what each is about
	produced map[string]produced     // a producer's partitions, by key
	report   string
}

// produced is a producer's count of records for a partition and when it
// last grew.
type produced struct {
	msgs int64
	at   time.Time
}

// linkProblem is something the client needs and lacks, since when, and
// when the statistics last showed it needed: one no longer needed (the
// partition revoked, nothing produced to it within needFor) is dropped
// linkGrace after, unresolved, as nothing more is known of it.
type linkProblem struct {
	text        string
	since, seen time.Time
}

// rdStats is the part of librdkafka's statistics JSON (STATISTICS.md)
// that linkHealth reads.
type rdStats struct {
	Brokers map[string]rdBroker `json:"brokers"`
	Topics  map[string]struct {
		Partitions map[string]rdPartition `json:"partitions"`
	} `json:"topics"`
	Cgrp *struct {
		State string `json:"state"`
	} `json:"cgrp"`
}

type rdBroker struct {
	NodeID int32  `json:"nodeid"`
	State  string `json:"state"`
}

type rdPartition struct {
	Partition int32 `json:"partition"`
	Leader    int32 `json:"leader"`
	// Broker is the broker the partition is fetched from (a follower
	// with client.rack set) or produced to; -1 while none is.
	Broker  int32 `json:"broker"`
	Desired bool  `json:"desired"`
	// Msgs is a producer's count of records produced to the partition
	// (transmitted or not). The queue counts (msgq_cnt, xmit_msgq_cnt)
	// were seen at 0 while a record waited for an unreachable leader.
	Msgs int64 `json:"msgs"`
}

// brokerUp is librdkafka's state of a broker connection that works
// (UPDATE: the same in librdkafka releases before 2.x; 2.11 has UP only).
func brokerUp(state string) bool { return state == "UP" || state == "UPDATE" }

// observe reads one statistics event.
func (h *linkHealth) observe(now time.Time, statsJSON string) {
	var st rdStats
	if err := json.Unmarshal([]byte(statsJSON), &st); err != nil {
		// Not what STATISTICS.md describes: no verdict rather than a
		// wrong one, nor an old one kept.
		h.mu.Lock()
		defer h.mu.Unlock()
		h.problems, h.report = nil, ""
		return
	}
	// Each problem by what it is about, so that its grace runs through
	// the states a connection cycles through (DOWN, CONNECT, …), with what
	// the latest statistics say of it; "" for what they show working.
	seen := map[string]string{}
	if st.Cgrp != nil {
		seen["group"] = ""
		if st.Cgrp.State != "up" {
			seen["group"] = fmt.Sprintf("the consumer group's coordinator is not reachable (librdkafka group state %q)", st.Cgrp.State)
		}
	}
	states := map[int32]string{}
	for _, b := range st.Brokers {
		if b.NodeID >= 0 {
			states[b.NodeID] = b.State
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for topic, t := range st.Topics {
		for _, p := range t.Partitions {
			if p.Partition < 0 {
				continue // librdkafka's queue of records not yet given a partition
			}
			key := fmt.Sprintf("%s[%d]", topic, p.Partition)
			if !h.needsLocked(now, key, topic, p) {
				continue
			}
			id, which := p.Broker, "broker"
			if id < 0 || id == p.Leader {
				id, which = p.Leader, "leader"
			}
			switch state, known := states[id]; {
			case id < 0:
				seen[key] = key + " has no leader"
			case !known:
				seen[key] = fmt.Sprintf("%s: its %s, broker %d, is not connected", key, which, id)
			case !brokerUp(state):
				seen[key] = fmt.Sprintf("%s: its %s, broker %d, is not reachable (connection state %s)", key, which, id, state)
			default:
				seen[key] = ""
			}
		}
	}

	if h.problems == nil {
		h.problems = map[string]*linkProblem{}
	}
	for key, text := range seen {
		switch p := h.problems[key]; {
		case text == "":
			delete(h.problems, key)
		case p == nil:
			h.problems[key] = &linkProblem{text: text, since: now, seen: now}
		default:
			p.text, p.seen = text, now
		}
	}
	var lasting []string
	for key, p := range h.problems {
		switch {
		case now.Sub(p.seen) >= linkGrace:
			// Not needed for as long (nothing produced to the
			// partition lately, the partition revoked): what became of
			// it is not known.
			delete(h.problems, key)
		case now.Sub(p.since) >= linkGrace:
			lasting = append(lasting, p.text)
		}
	}
	slices.Sort(lasting)
	if len(lasting) > 3 {
		lasting = append(lasting[:3], fmt.Sprintf("and %d more", len(lasting)-3))
	}
	h.report = strings.Join(lasting, "; ")
}

// needsLocked reports whether the client needs the partition's broker:
// the consumer for its assigned partitions, the producer for those it
// produced to within needFor. h.mu is held.
func (h *linkHealth) needsLocked(now time.Time, key, topic string, p rdPartition) bool {
	if h.topic != "" {
		return topic == h.topic && p.Desired
	}
	if h.produced == nil {
		h.produced = map[string]produced{}
	}
	last, ok := h.produced[key]
	if !ok || p.Msgs != last.msgs {
		last = produced{msgs: p.Msgs, at: now}
		if !ok {
			last.at = time.Time{} // records produced before the first statistics: not known when
		}
		h.produced[key] = last
	}
	return now.Sub(last.at) < cmp.Or(h.needFor, linkGrace)
}

// restart forgets every problem: no broker answered a probe, which says
// more than the statistics do (a connection set up during the outage still
// shows its state for seconds after), and once one answers, what it still
// lacks has its grace anew. Without it, the relay showed not ready for 5 s
// after a frozen broker thawed, on the statistics of the freeze.
func (h *linkHealth) restart() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.problems, h.report = nil, ""
}

// probed takes a probe's result and returns it: a failure while ctx is
// live, other than a missing topic (some broker answered that), says no
// broker answered in time, and restarts the problems.
func (h *linkHealth) probed(ctx context.Context, err error) error {
	var topicErr *record.TopicError
	if err != nil && ctx.Err() == nil && !errors.As(err, &topicErr) {
		h.restart()
	}
	return err
}

// problem is what the client has lacked for linkGrace, "" when nothing.
func (h *linkHealth) problem() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.report
}

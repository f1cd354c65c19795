package kafkax

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
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
//
// A connection's state is not enough: a link that drops packets without a
// reset (a broker host frozen, a firewall that drops) keeps its connection
// UP until librdkafka's request timeout (socket.timeout.ms, 60 s), and the
// group's coordinator connection then cycles through its setup states
// while librdkafka's group state stays "up". Measured with one of two
// brokers not answering (kfake, its requests held): a silent input leader
// showed after 72 s, a silent coordinator never, /readyz 200 meanwhile. So
// a broker that owes the client answers and has sent nothing back for
// longer than they take is a problem too (silence).

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
	// answerWithin is how long a working broker may hold a request of
	// this client: the consumer's fetch wait (a fetch is held until
	// records arrive or it runs out), 0 for a producer. Silence beyond it
	// is a problem, reported after linkGrace like any other.
	answerWithin time.Duration

	mu       sync.Mutex
	problems map[string]*linkProblem // by what each is about
	produced map[string]produced     // a producer's partitions, by key
	owing    map[string]time.Time    // since when each broker (by name) has owed answers
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
	// silence: the statistics date it (silenceLocked), so a probe no
	// broker answered does not forget it (see probed); lasting: it has
	// lasted linkGrace, and is reported.
	silence, lasting bool
}

// rdStats is the part of librdkafka's statistics JSON (STATISTICS.md)
// that linkHealth reads.
type rdStats struct {
	Brokers map[string]rdBroker `json:"brokers"`
	Topics  map[string]struct {
		Partitions map[string]rdPartition `json:"partitions"`
	} `json:"topics"`
	Cgrp *struct {
		State     string `json:"state"`
		JoinState string `json:"join_state"`
	} `json:"cgrp"`
}

type rdBroker struct {
	Name     string `json:"name"`
	NodeID   int32  `json:"nodeid"`
	NodeName string `json:"nodename"`
	Source   string `json:"source"`
	State    string `json:"state"`
	// Requests waiting to be sent and sent awaiting their response, and
	// the microseconds since the connection last received anything (-1:
	// nothing yet, or not connected).
	OutBuf   int64 `json:"outbuf_cnt"`
	WaitResp int64 `json:"waitresp_cnt"`
	RxIdle   int64 `json:"rxidle"`
}

// coordinator is the logical broker through which librdkafka talks to the
// consumer group's coordinator: a connection of its own, with node id -1.
func (b rdBroker) coordinator() bool { return b.Source == "logical" && b.Name == "GroupCoordinator" }

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
	h.mu.Lock()
	defer h.mu.Unlock()
	// Each problem by what it is about, so that its grace runs through
	// the states a connection cycles through (DOWN, CONNECT, …), with what
	// the latest statistics say of it; no text for what they show working.
	seen := map[string]finding{}
	brokers := map[int32]rdBroker{}
	var coord *rdBroker
	for _, b := range st.Brokers {
		switch {
		case b.NodeID >= 0:
			brokers[b.NodeID] = b
		case b.coordinator():
			coord = &b
		}
	}
	h.trackOwingLocked(now, st.Brokers)
	if st.Cgrp != nil {
		if f, known := h.groupLocked(now, st.Cgrp.State, st.Cgrp.JoinState, coord); known {
			seen["group"] = f
		}
	}
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
			b, known := brokers[id]
			switch {
			case id < 0:
				seen[key] = finding{text: key + " has no leader"}
			case !known:
				seen[key] = finding{text: fmt.Sprintf("%s: its %s, broker %d, is not connected", key, which, id)}
			case !brokerUp(b.State):
				seen[key] = finding{text: fmt.Sprintf("%s: its %s, broker %d, is not reachable (connection state %s)", key, which, id, b.State)}
			default:
				seen[key] = h.silenceLocked(now, b, fmt.Sprintf("%s: its %s, broker %d,", key, which, id))
			}
		}
	}

	if h.problems == nil {
		h.problems = map[string]*linkProblem{}
	}
	for key, f := range seen {
		since := now
		if !f.since.IsZero() {
			since = f.since
		}
		switch p := h.problems[key]; {
		case f.text == "":
			delete(h.problems, key)
		case p == nil:
			h.problems[key] = &linkProblem{text: f.text, since: since, seen: now, silence: !f.since.IsZero()}
		default:
			// A silence is measured anew by each event: a broker that
			// answered something since has a later one, and a slow link
			// that answers every few seconds never lasts the grace. Other
			// problems keep their start, a silence's too (a coordinator
			// silent, then set up anew in vain).
			if (f.since.IsZero() || !p.silence) && p.since.Before(since) {
				since = p.since
			}
			p.text, p.seen, p.since, p.silence = f.text, now, since, !f.since.IsZero()
		}
	}
	for key, p := range h.problems {
		if now.Sub(p.seen) >= linkGrace {
			// Not needed for as long (nothing produced to the
			// partition lately, the partition revoked): what became of
			// it is not known.
			delete(h.problems, key)
			continue
		}
		p.lasting = now.Sub(p.since) >= linkGrace
	}
	h.reportLocked()
}

// reportLocked sets the report from the problems that have lasted
// linkGrace. h.mu is held.
func (h *linkHealth) reportLocked() {
	var lasting []string
	for _, p := range h.problems {
		if p.lasting {
			lasting = append(lasting, p.text)
		}
	}
	slices.Sort(lasting)
	if len(lasting) > 3 {
		lasting = append(lasting[:3], fmt.Sprintf("and %d more", len(lasting)-3))
	}
	h.report = strings.Join(lasting, "; ")
}

// finding is what one statistics event says of something the client
// needs: text "" when it works; since, when not zero, when the problem
// began by the statistics' own account (a broker's silence), earlier than
// the event.
type finding struct {
	text  string
	since time.Time
}

// groupLocked is the finding on the consumer's group, given librdkafka's
// group state, its join state and the coordinator's connection (nil when
// the statistics have none); known false when they say nothing either way:
// while the group rebalances, a JoinGroup may wait at the coordinator for
// the other members, for minutes, and is no silence, so a silence seen
// before is kept as it was, unless the coordinator has sent something
// since it began. h.mu is held.
func (h *linkHealth) groupLocked(now time.Time, state, joinState string, coord *rdBroker) (f finding, known bool) {
	const lacks = "the consumer group's coordinator"
	switch {
	case state != "up":
		return finding{text: fmt.Sprintf("%s is not reachable (librdkafka group state %q)", lacks, state)}, true
	case coord == nil:
		return finding{}, true
	case !brokerUp(coord.State):
		return finding{text: fmt.Sprintf("%s, at %s, is not reachable (connection state %s)", lacks, coord.NodeName, coord.State)}, true
	case joinState != "steady":
		p := h.problems["group"]
		if p != nil && p.silence && coord.RxIdle >= 0 && now.Add(-time.Duration(coord.RxIdle)*time.Microsecond).After(p.since) {
			return finding{}, true
		}
		return finding{}, false
	default:
		return h.silenceLocked(now, *coord, fmt.Sprintf("%s, at %s,", lacks, coord.NodeName)), true
	}
}

// trackOwingLocked keeps since when each broker has owed the client
// answers (requests queued or awaiting their response in every
// statistics event since). h.mu is held.
func (h *linkHealth) trackOwingLocked(now time.Time, brokers map[string]rdBroker) {
	if h.owing == nil {
		h.owing = map[string]time.Time{}
	}
	for name, b := range brokers {
		owes := brokerUp(b.State) && b.OutBuf+b.WaitResp > 0
		if _, ok := h.owing[name]; ok && owes {
			continue
		}
		delete(h.owing, name)
		if owes {
			h.owing[name] = now
		}
	}
	for name := range h.owing {
		if _, ok := brokers[name]; !ok {
			delete(h.owing, name)
		}
	}
}

// silenceLocked is the finding on broker b (connected) that the client
// needs, what names it: a problem when it has owed answers, and received
// nothing, for longer than answerWithin. Its silence is the shorter of the
// two: rxidle alone would count the quiet before a request sent to an
// idle connection, the owing alone a broker that answers one of several
// requests outstanding. The problem dates from when the answers were due,
// so that once its grace has passed it is reported at once, also after a
// failed probe forgot the other problems (probed). h.mu is held.
func (h *linkHealth) silenceLocked(now time.Time, b rdBroker, what string) finding {
	owes, ok := h.owing[b.Name]
	if !ok || b.RxIdle < 0 {
		return finding{}
	}
	silent := min(time.Duration(b.RxIdle)*time.Microsecond, now.Sub(owes))
	if silent <= h.answerWithin {
		return finding{}
	}
	return finding{
		text:  fmt.Sprintf("%s does not answer (requests outstanding, nothing received for over %s)", what, h.answerWithin+linkGrace),
		since: now.Add(h.answerWithin - silent),
	}
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
		if !ok && p.Msgs == 0 {
			// Listed (its topic's metadata names every partition), never
			// produced to. Records counted at first sight were produced
			// within the last statsInterval: the statistics begin with the
			// client, and a partition is listed once produced to.
			last.at = time.Time{}
		}
		h.produced[key] = last
	}
	return now.Sub(last.at) < cmp.Or(h.needFor, linkGrace)
}

// probed takes a probe's result and returns it. A failure while ctx is
// live, other than a missing topic (some broker answered that), says no
// broker answered in time: that says more than the statistics do of a
// connection's state (one set up during the outage still shows its state
// for seconds after), so those problems are forgotten, and once a broker
// answers, what the client still lacks has its grace anew. Without it, the
// relay showed not ready for 5 s after a frozen broker thawed, on the
// statistics of the freeze. A silence is kept: it is why a probe sent to
// the silent broker failed, and what readiness should name; the statistics
// after a thaw end it within statsInterval.
func (h *linkHealth) probed(ctx context.Context, err error) error {
	var topicErr *record.TopicError
	if err != nil && ctx.Err() == nil && !errors.As(err, &topicErr) {
		h.mu.Lock()
		defer h.mu.Unlock()
		maps.DeleteFunc(h.problems, func(_ string, p *linkProblem) bool { return !p.silence })
		h.reportLocked()
	}
	return err
}

// problem is what the client has lacked for linkGrace, "" when nothing.
func (h *linkHealth) problem() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.report
}

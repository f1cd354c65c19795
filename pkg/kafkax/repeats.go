package kafkax

import (
	"regexp"
	"sync"
	"time"
)

// repeats holds back a message that librdkafka repeats: every reconnect to
// a broker that is down or refuses the credentials logs the same lines
// again, several a second across the clients. A key is logged at most once
// every errEvery; the next line of it says how many were held back.
type repeats struct {
	mu   sync.Mutex
	seen map[string]*seenKey
}

type seenKey struct {
	at   time.Time
	held int
}

// errEvery is how often one repeated message is logged.
const errEvery = 30 * time.Second

// maxKeys bounds the memory of keys: past it they are forgotten (and may
// be logged once more).
const maxKeys = 256

// allow reports whether a line of key may be logged at now, and how many
// of it were held back since the last one.
func (r *repeats) allow(key string, now time.Time) (ok bool, held int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, found := r.seen[key]
	if found && now.Sub(s.at) < errEvery {
		s.held++
		return false, 0
	}
	if found {
		held = s.held
	}
	if r.seen == nil || (!found && len(r.seen) >= maxKeys) {
		r.seen = map[string]*seenKey{}
	}
	r.seen[key] = &seenKey{at: now}
	return true, held
}

var digits = regexp.MustCompile(`[0-9]+`)

// messageKey is a librdkafka message with its numbers taken out ("after
// 3ms", "1/1 brokers"): lines that differ only in them are one repeat.
func messageKey(tag, msg string) string { return tag + "\x00" + digits.ReplaceAllString(msg, "#") }

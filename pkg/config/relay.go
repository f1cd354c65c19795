package config

import (
	"errors"
	"sort"
	"strings"

	"github.com/pcp/route-processing/pkg/relay"
)

// Relay is the configuration of bin/outbox-relay: the common settings and
// the relay's own, whose defaults and rules are relay.Config's (relayVars
// names the variable of each field).
type Relay struct {
	Common
	relay.Config
	// ListenURL is the connection of the relay's LISTEN
	// (DATABASE_LISTEN_URL; default DatabaseURL). Behind a transaction
	// pooler LISTEN hears nothing: point it at PostgreSQL directly (or at a
	// session-mode pool). It may hold a password: never log it.
	ListenURL string
}

// relayVars names the environment variable of each relay.Config field that
// one sets.
func relayVars() map[string]string {
	return map[string]string{
		"MaxAttempts":           "OUTBOX_MAX_ATTEMPTS",
		"InitialBackoff":        "OUTBOX_INITIAL_BACKOFF",
		"MaxBackoff":            "OUTBOX_MAX_BACKOFF",
		"LockTimeout":           "OUTBOX_LOCK_TIMEOUT",
		"BatchSize":             "OUTBOX_BATCH_SIZE",
		"PollInterval":          "OUTBOX_POLL_INTERVAL",
		"PublishTimeout":        "OUTBOX_PUBLISH_TIMEOUT",
		"Retention":             "OUTBOX_RETENTION",
		"ProbeMaxBackoff":       "OUTBOX_PROBE_MAX_BACKOFF",
		"Workers":               "OUTBOX_WORKERS",
		"RetentionInterval":     "OUTBOX_RETENTION_INTERVAL",
		"RetentionBatch":        "OUTBOX_RETENTION_BATCH",
		"StatsInterval":         "OUTBOX_STATS_INTERVAL",
		"ClaimFullScanInterval": "OUTBOX_CLAIM_FULL_SCAN_INTERVAL",
		"ClaimWatermarkMargin":  "OUTBOX_CLAIM_WATERMARK_MARGIN",
		"DBTimeout":             "OUTBOX_DB_TIMEOUT",
		"ReindexInterval":       "OUTBOX_REINDEX_INTERVAL",
		"ReindexMinBytes":       "OUTBOX_REINDEX_MIN_BYTES",
	}
}

// The relay's variables are read with positiveInt/duration rather than parsed
// blindly: relay.Config's zero value means "default", so a variable set to
// 0 (or below 1) must be refused here, naming it, instead of silently
// becoming the default. Three take 0 for "off" instead (OUTBOX_RETENTION,
// OUTBOX_CLAIM_FULL_SCAN_INTERVAL, OUTBOX_REINDEX_INTERVAL): their 0 is
// passed on as the negative value relay.Config reads as off.

// outboxMaxAttempts reads OUTBOX_MAX_ATTEMPTS, which both binaries read
// (the ingestor stores it in new rows' max_attempts): one set of bounds,
// one message.
func (r *reader) outboxMaxAttempts(def int) int {
	return r.intRange("OUTBOX_MAX_ATTEMPTS", def, 1, relay.MaxMaxAttempts)
}

// LoadRelay reads the relay's configuration from environ (os.Environ form).
// It only maps variables onto relay.Config (an unset variable leaves the
// field zero, for relay's default) and names the variable of a field that
// relay.Config.Validate rejects.
func LoadRelay(environ []string) (Relay, error) {
	r := newReader(environ)
	v := relayVars()
	c := Relay{
		Common: r.common(),
		Config: relay.Config{
			MaxAttempts:           r.outboxMaxAttempts(0), // 0: relay's default
			InitialBackoff:        r.duration(v["InitialBackoff"], 0, false),
			MaxBackoff:            r.duration(v["MaxBackoff"], 0, false),
			LockTimeout:           r.duration(v["LockTimeout"], 0, false),
			BatchSize:             r.positiveInt(v["BatchSize"]),
			PollInterval:          r.duration(v["PollInterval"], 0, false),
			PublishTimeout:        r.duration(v["PublishTimeout"], 0, false),
			Retention:             r.duration(v["Retention"], 0, true),
			ProbeMaxBackoff:       r.duration(v["ProbeMaxBackoff"], 0, false),
			Workers:               r.positiveInt(v["Workers"]),
			RetentionInterval:     r.duration(v["RetentionInterval"], 0, false),
			RetentionBatch:        r.positiveInt(v["RetentionBatch"]),
			StatsInterval:         r.duration(v["StatsInterval"], 0, false),
			ClaimFullScanInterval: r.duration(v["ClaimFullScanInterval"], 0, true),
			ClaimWatermarkMargin:  r.duration(v["ClaimWatermarkMargin"], 0, false),
			DBTimeout:             r.duration(v["DBTimeout"], 0, false),
			ReindexInterval:       r.duration(v["ReindexInterval"], 0, true),
			ReindexMinBytes:       int64(r.positiveInt(v["ReindexMinBytes"])),
		},
	}
	// Blank is unset, as for the required URL.
	c.ListenURL = c.DatabaseURL
	if u := r.env["DATABASE_LISTEN_URL"]; strings.TrimSpace(u) != "" {
		c.ListenURL = u
	}
	if s, set := r.env[v["ClaimFullScanInterval"]]; set && s != "" && c.ClaimFullScanInterval == 0 {
		c.ClaimFullScanInterval = -1 // 0 turns the claim watermark off
	}
	if s, set := r.env[v["ReindexInterval"]]; set && s != "" && c.ReindexInterval == 0 {
		c.ReindexInterval = -1 // OUTBOX_REINDEX_INTERVAL=0 turns the reindexer off
	}
	if s, set := r.env[v["Retention"]]; set && s != "" && c.Retention == 0 {
		c.Retention = -1 // OUTBOX_RETENTION=0 disables the sweep
	}
	if r.err != nil {
		return c, r.err
	}
	var fe *relay.FieldError
	if err := c.Validate(); errors.As(err, &fe) {
		name, ok := v[fe.Field]
		if !ok {
			name = "OUTBOX_*"
		}
		return c, &Error{Var: name, Reason: relayFieldsToVars(v).Replace(fe.Reason)}
	} else if err != nil {
		return c, err
	}
	c.Config = c.WithDefaults()
	return c, nil
}

// relayFieldsToVars rewrites the relay.Config field names a rule's reason
// mentions ("is less than InitialBackoff") as their variables. Longer names
// go first: at one position the replacer takes the first that matches, and
// RetentionInterval must not become OUTBOX_RETENTIONInterval.
func relayFieldsToVars(vars map[string]string) *strings.Replacer {
	fields := make([]string, 0, len(vars))
	for f := range vars {
		fields = append(fields, f)
	}
	sort.Slice(fields, func(i, j int) bool { return len(fields[i]) > len(fields[j]) })
	pairs := make([]string, 0, 2*len(fields))
	for _, f := range fields {
		pairs = append(pairs, f, vars[f])
	}
	return strings.NewReplacer(pairs...)
}

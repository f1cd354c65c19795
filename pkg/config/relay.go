package config

import (
	"errors"
	"math"

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
		"ClaimFullScanInterval": "OUTBOX_CLAIM_FULL_SCAN_INTERVAL",
		"ClaimWatermarkMargin":  "OUTBOX_CLAIM_WATERMARK_MARGIN",
		"DBTimeout":             "OUTBOX_DB_TIMEOUT",
		"ReindexInterval":       "OUTBOX_REINDEX_INTERVAL",
		"ReindexMinBytes":       "OUTBOX_REINDEX_MIN_BYTES",
	}
}

// The relay's variables are read with intRange/duration rather than parsed
// blindly: relay.Config's zero value means "default", so a variable set to
// 0 (or below 1) must be refused here, naming it, instead of silently
// becoming the default.

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
			MaxAttempts:           r.intRange(v["MaxAttempts"], 0, 1, math.MaxInt32),
			InitialBackoff:        r.duration(v["InitialBackoff"], 0, false),
			MaxBackoff:            r.duration(v["MaxBackoff"], 0, false),
			LockTimeout:           r.duration(v["LockTimeout"], 0, false),
			BatchSize:             r.intRange(v["BatchSize"], 0, 1, math.MaxInt32),
			PollInterval:          r.duration(v["PollInterval"], 0, false),
			PublishTimeout:        r.duration(v["PublishTimeout"], 0, false),
			Retention:             r.duration(v["Retention"], 0, true),
			ProbeMaxBackoff:       r.duration(v["ProbeMaxBackoff"], 0, false),
			Workers:               r.intRange(v["Workers"], 0, 1, math.MaxInt32),
			RetentionInterval:     r.duration(v["RetentionInterval"], 0, false),
			RetentionBatch:        r.intRange(v["RetentionBatch"], 0, 1, math.MaxInt32),
			ClaimFullScanInterval: r.duration(v["ClaimFullScanInterval"], 0, true),
			ClaimWatermarkMargin:  r.duration(v["ClaimWatermarkMargin"], 0, false),
			DBTimeout:             r.duration(v["DBTimeout"], 0, false),
			ReindexInterval:       r.duration(v["ReindexInterval"], 0, true),
			ReindexMinBytes:       int64(r.intRange(v["ReindexMinBytes"], 0, 1, math.MaxInt)),
		},
	}
	c.ListenURL = r.str("DATABASE_LISTEN_URL", c.DatabaseURL)
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
		return c, &Error{Var: name, Reason: fe.Reason}
	} else if err != nil {
		return c, err
	}
	c.Config = c.WithDefaults()
	return c, nil
}

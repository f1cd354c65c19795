package config

import (
	"errors"
	"slices"
	"strings"
	"time"

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

// relayVars maps the OUTBOX_* variables onto relay.Config fields. Each is
// read strictly (a count of at least 1, a positive duration) rather than
// parsed blindly: relay.Config's zero value means "default", so a variable
// set to 0 must be refused here, naming it, instead of silently becoming
// the default. Those marked off take 0 for "off" instead, passed on as the
// negative value relay.Config reads as off.
var relayVars = []relayVar{
	{"OUTBOX_MAX_ATTEMPTS", "MaxAttempts", false, func(c *relay.Config) any { return &c.MaxAttempts }},
	{"OUTBOX_INITIAL_BACKOFF", "InitialBackoff", false, func(c *relay.Config) any { return &c.InitialBackoff }},
	{"OUTBOX_MAX_BACKOFF", "MaxBackoff", false, func(c *relay.Config) any { return &c.MaxBackoff }},
	{"OUTBOX_LOCK_TIMEOUT", "LockTimeout", false, func(c *relay.Config) any { return &c.LockTimeout }},
	{"OUTBOX_BATCH_SIZE", "BatchSize", false, func(c *relay.Config) any { return &c.BatchSize }},
	{"OUTBOX_POLL_INTERVAL", "PollInterval", false, func(c *relay.Config) any { return &c.PollInterval }},
	{"OUTBOX_PUBLISH_TIMEOUT", "PublishTimeout", false, func(c *relay.Config) any { return &c.PublishTimeout }},
	{"OUTBOX_RETENTION", "Retention", true, func(c *relay.Config) any { return &c.Retention }},
	{"OUTBOX_PROBE_MAX_BACKOFF", "ProbeMaxBackoff", false, func(c *relay.Config) any { return &c.ProbeMaxBackoff }},
	{"OUTBOX_WORKERS", "Workers", false, func(c *relay.Config) any { return &c.Workers }},
	{"OUTBOX_RETENTION_INTERVAL", "RetentionInterval", false, func(c *relay.Config) any { return &c.RetentionInterval }},
	{"OUTBOX_RETENTION_BATCH", "RetentionBatch", false, func(c *relay.Config) any { return &c.RetentionBatch }},
	{"OUTBOX_STATS_INTERVAL", "StatsInterval", false, func(c *relay.Config) any { return &c.StatsInterval }},
	{"OUTBOX_CLAIM_FULL_SCAN_INTERVAL", "ClaimFullScanInterval", true, func(c *relay.Config) any { return &c.ClaimFullScanInterval }},
	{"OUTBOX_CLAIM_WATERMARK_MARGIN", "ClaimWatermarkMargin", false, func(c *relay.Config) any { return &c.ClaimWatermarkMargin }},
	{"OUTBOX_DB_TIMEOUT", "DBTimeout", false, func(c *relay.Config) any { return &c.DBTimeout }},
	{"OUTBOX_REINDEX_INTERVAL", "ReindexInterval", true, func(c *relay.Config) any { return &c.ReindexInterval }},
	{"OUTBOX_REINDEX_MIN_BYTES", "ReindexMinBytes", false, func(c *relay.Config) any { return &c.ReindexMinBytes }},
}

// relayVar is one row of relayVars: the variable, the field it sets (as
// relay.FieldError names it), whether 0 turns the setting off, and the
// field itself.
type relayVar struct {
	name, field string
	off         bool
	dst         func(*relay.Config) any
}

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
	return loadRelay(newReader(environ))
}

func loadRelay(r *reader) (Relay, error) {
	c := Relay{Common: r.common()}
	for _, v := range relayVars {
		switch dst := v.dst(&c.Config).(type) {
		case *int:
			if v.field == "MaxAttempts" {
				*dst = r.outboxMaxAttempts(0) // the ingestor's bounds; 0: relay's default
			} else {
				*dst = r.positiveInt(v.name)
			}
		case *int64:
			*dst = int64(r.positiveInt(v.name))
		case *time.Duration:
			*dst = r.duration(v.name, 0, v.off)
			if s, _ := r.get(v.name); v.off && s != "" && *dst == 0 {
				*dst = -1 // set to 0: off
			}
		}
	}
	// Blank is unset, as for the required URL.
	c.ListenURL = c.DatabaseURL
	if u, _ := r.get("DATABASE_LISTEN_URL"); strings.TrimSpace(u) != "" {
		c.ListenURL = u
	}
	if r.err != nil {
		return c, r.err
	}
	var fe *relay.FieldError
	if err := c.Validate(); errors.As(err, &fe) {
		return c, &Error{Var: relayVarOf(fe.Field), Reason: relayFieldsToVars().Replace(fe.Reason)}
	} else if err != nil {
		return c, err
	}
	c.Config = c.WithDefaults()
	return c, nil
}

// relayVarOf names the variable behind a relay.Config field (OUTBOX_* when
// no variable sets it).
func relayVarOf(field string) string {
	for _, v := range relayVars {
		if v.field == field {
			return v.name
		}
	}
	return "OUTBOX_*"
}

// relayFieldsToVars rewrites the relay.Config field names a rule's reason
// mentions ("is less than InitialBackoff") as their variables. Longer names
// go first: at one position the replacer takes the first that matches, and
// RetentionInterval must not become OUTBOX_RETENTIONInterval.
func relayFieldsToVars() *strings.Replacer {
	vars := slices.Clone(relayVars)
	slices.SortFunc(vars, func(a, b relayVar) int { return len(b.field) - len(a.field) })
	pairs := make([]string, 0, 2*len(vars))
	for _, v := range vars {
		pairs = append(pairs, v.field, v.name)
	}
	return strings.NewReplacer(pairs...)
}

package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

type backlogResults struct {
	secs  []float64 // relay start → all PUBLISHED
	rates []float64
	rows  int
	obs   []observation
	errs  []string
	build time.Duration
}

// backlogPhase builds a database with backlogRows PENDING outbox rows from
// one the ingestor filled: its passports and outbox rows are copied with new
// ids (payloads keep their size and shape; routeId in the payload follows
// the new id) until the outbox holds the target. Each run drains a copy.
func (b *bench) backlogPhase(srcs []string, deadline time.Time) backlogResults {
	var r backlogResults
	if len(srcs) == 0 {
		r.errs = append(r.errs, "no database from the ingest phase to grow")
		return r
	}
	say("bench: building a %d-row backlog ...", b.cfg.backlogRows)
	start := time.Now()
	tpl := "backlog_tpl"
	b.cloneDB(srcs[0], tpl)
	defer b.dropDB(tpl)
	if err := b.amplify(b.pg.URL(tpl), b.cfg.backlogRows); err != nil {
		r.errs = append(r.errs, err.Error())
		return r
	}
	r.build = time.Since(start)
	for run := 0; run < b.cfg.runs; run++ {
		if run > 0 && !fits(deadline, r.obs) {
			break
		}
		say("bench: backlog run %d/%d ...", run+1, b.cfg.runs)
		res, err := b.relayRun("backlog", tpl, run, nil)
		if err != nil {
			r.errs = append(r.errs, err.Error())
			break
		}
		say("bench:   %d rows in %s (%.0f events/s)", res.rows, res.total.Round(time.Millisecond), res.rate)
		r.rows = res.rows
		r.secs = append(r.secs, res.total.Seconds())
		r.rates = append(r.rates, float64(res.rows)/res.total.Seconds())
		r.obs = append(r.obs, res.obs)
	}
	return r
}

func (b *bench) amplify(url string, target int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	var have int
	if err := conn.QueryRow(ctx, `select count(*) from route_passport_outbox`).Scan(&have); err != nil {
		return err
	}
	if have == 0 {
		return fmt.Errorf("backlog: the source database has no outbox rows")
	}
	copies := (target - have + have - 1) / have // extra copies of every passport
	stmts := []string{
		`create temp table m as select route_id as old_id, k, gen_random_uuid() as new_id
		   from route_passports, generate_series(1, ` + strconv.Itoa(copies) + `) k`,
		`create temp table p2 as select m.new_id as _new, m.k as _k, p.* from route_passports p join m on m.old_id = p.route_id`,
		`update p2 set route_id = _new, source_offset = source_offset + _k * 1000000000000`,
		`alter table p2 drop column _new, drop column _k`,
		`insert into route_passports select * from p2`,
		`create temp table o2 as select m.new_id as _new, o.* from route_passport_outbox o join m on m.old_id = o.route_id`,
		`update o2 set id = gen_random_uuid(), route_id = _new,
		   payload = jsonb_set(payload, '{data,routeId}', to_jsonb(_new::text))`,
		`alter table o2 drop column _new`,
		`insert into route_passport_outbox select * from o2`,
	}
	for _, s := range stmts {
		if _, err := conn.Exec(ctx, s); err != nil {
			return fmt.Errorf("backlog: %s: %w", strings.Fields(s)[0:3], err)
		}
	}
	// Trim to the target exactly, newest first, then let the planner and
	// the visibility map catch up as they would on a real table.
	if _, err := conn.Exec(ctx, `delete from route_passport_outbox where id in (
		select id from route_passport_outbox order by created_at desc, id limit greatest(0, (select count(*) from route_passport_outbox) - $1))`, target); err != nil {
		return fmt.Errorf("backlog: trim: %w", err)
	}
	for _, s := range []string{`vacuum analyze route_passports`, `vacuum analyze route_passport_outbox`, `checkpoint`} {
		if _, err := conn.Exec(ctx, s); err != nil {
			return fmt.Errorf("backlog: %s: %w", s, err)
		}
	}
	return nil
}

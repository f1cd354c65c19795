-- ANALYZE samples 300 rows per unit of the largest statistics target
-- among a table's columns: 30,000 rows with the default of 100. On the
-- outbox, whose rows (about 2 KB each, fillfactor 70) fill a page three
-- at a time, that read nearly every page of a table of 60,000 rows, and
-- autoanalyze comes about once a minute at 1,000 passports/s (migration
-- 006: every 50,000 changed rows, four per event). It took 0.8-1.1 s of
-- CPU and 25,000 page reads each time, more than the vacuum it follows, on
-- a table whose statements the planner cannot get wrong for want of
-- detail: claims and the retention sweep go through the partial indexes,
-- marks by primary key, and the plan tests hold them there whatever the
-- statistics say. A target of 10 samples 3,000 rows: 0.1 s of CPU and
-- about 3,000 page reads (measured in the latency bench, 2026-12-05), still
-- plenty for three status values and the timestamps' histograms.
--
-- A column added to the outbox later needs the same target, or ANALYZE
-- samples 30,000 rows again (TestMigrate/OutboxAnalyzeSamplesFewRows).
alter table route_passport_outbox
    alter column id set statistics 10,
    alter column route_id set statistics 10,
    alter column event_type set statistics 10,
    alter column topic set statistics 10,
    alter column message_key set statistics 10,
    alter column payload set statistics 10,
    alter column headers set statistics 10,
    alter column status set statistics 10,
    alter column attempts set statistics 10,
    alter column max_attempts set statistics 10,
    alter column next_attempt_at set statistics 10,
    alter column locked_until set statistics 10,
    alter column lock_token set statistics 10,
    alter column last_error set statistics 10,
    alter column created_at set statistics 10,
    alter column updated_at set statistics 10,
    alter column published_at set statistics 10;

---- create above / drop below ----

alter table route_passport_outbox
    alter column id set statistics -1,
    alter column route_id set statistics -1,
    alter column event_type set statistics -1,
    alter column topic set statistics -1,
    alter column message_key set statistics -1,
    alter column payload set statistics -1,
    alter column headers set statistics -1,
    alter column status set statistics -1,
    alter column attempts set statistics -1,
    alter column max_attempts set statistics -1,
    alter column next_attempt_at set statistics -1,
    alter column locked_until set statistics -1,
    alter column lock_token set statistics -1,
    alter column last_error set statistics -1,
    alter column created_at set statistics -1,
    alter column updated_at set statistics -1,
    alter column published_at set statistics -1;

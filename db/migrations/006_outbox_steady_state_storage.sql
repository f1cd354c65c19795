-- Steady-state storage of the outbox (issue 12). Every event's row goes
-- through four tuple versions — insert, claim (HOT), mark (non-HOT: status
-- is in the partial indexes' predicates), delete after OUTBOX_RETENTION —
-- forever, so the table lives on how cheap a version is and how soon
-- vacuum takes the dead ones back. See docs/capacity.md for the figures.
--
-- toast_tuple_target = 128: a row that PostgreSQL toasts at all (past
-- 2,032 bytes, a threshold no table setting moves) has its payload stored
-- out of line, so its heap tuple is ~300 bytes and the claim and mark
-- updates copy those, not the payload: the TOAST value is written once at
-- ingest and removed once by the retention delete. A typical row (~1.97 KB,
-- most of it the payload's jsonb) stays inline whatever this says. (It
-- applies to rows written from now on.)
--
-- Autovacuum per table, for the outbox heap and its TOAST table: the
-- defaults (20 % of the table + 50 dead rows, throttled to cost 200 per
-- 2 ms) wait until a table of millions of rows has hundreds of thousands of
-- dead versions and then vacuum it slowly. Here a vacuum starts after a
-- fixed number of dead (or inserted) rows whatever the table size, and runs
-- unthrottled: the dead versions are all recent and in the same few
-- thousand pages, and a vacuum that finishes quickly also frees the index
-- entries that the claim's index scan would otherwise step over.
-- autovacuum_naptime (server-wide, 1 min by default) still bounds how often
-- a worker looks; docs/capacity.md recommends 10 s for the outbox's server.
alter table route_passport_outbox set (
    toast_tuple_target = 128,
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 10000,
    autovacuum_vacuum_insert_scale_factor = 0,
    autovacuum_vacuum_insert_threshold = 10000,
    autovacuum_analyze_scale_factor = 0,
    autovacuum_analyze_threshold = 50000,
    autovacuum_vacuum_cost_delay = 0,
    toast.autovacuum_vacuum_scale_factor = 0,
    toast.autovacuum_vacuum_threshold = 10000,
    toast.autovacuum_vacuum_insert_scale_factor = 0,
    toast.autovacuum_vacuum_insert_threshold = 10000,
    toast.autovacuum_vacuum_cost_delay = 0
);

---- create above / drop below ----

alter table route_passport_outbox reset (
    toast_tuple_target,
    autovacuum_vacuum_scale_factor,
    autovacuum_vacuum_threshold,
    autovacuum_vacuum_insert_scale_factor,
    autovacuum_vacuum_insert_threshold,
    autovacuum_analyze_scale_factor,
    autovacuum_analyze_threshold,
    autovacuum_vacuum_cost_delay,
    toast.autovacuum_vacuum_scale_factor,
    toast.autovacuum_vacuum_threshold,
    toast.autovacuum_vacuum_insert_scale_factor,
    toast.autovacuum_vacuum_insert_threshold,
    toast.autovacuum_vacuum_cost_delay
);

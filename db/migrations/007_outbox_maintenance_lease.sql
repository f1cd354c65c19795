-- The relays' reindexer (pkg/relay/reindex.go) rebuilds bloated outbox
-- indexes. One relay at a time, and one pass per OUTBOX_REINDEX_INTERVAL
-- across all of them: a relay takes this lease with one conditional UPDATE
-- before it rebuilds, and leaves it set to the next allowed pass when it is
-- done. A single statement, so that it holds behind a transaction-mode
-- pooler, where a session advisory lock would not.
alter table outbox_relay_control add column maintenance_until timestamptz;

---- create above / drop below ----

alter table outbox_relay_control drop column maintenance_until;

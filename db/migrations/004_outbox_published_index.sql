---- tern: disable-tx ----
-- The retention sweep (outbox-relay, every minute per relay) deletes
-- PUBLISHED rows past retention. Without an index on published_at its last
-- statement of every sweep, the one that finds fewer rows than its limit,
-- reads the whole heap: seconds at millions of rows, per relay, per minute.
-- Only PUBLISHED rows are in this index, so claims (PENDING rows) do not
-- maintain it and stay HOT.
--
-- Built CONCURRENTLY (outside a transaction: the tern directive above) so
-- that ingest and relays keep writing while it builds on a large table. A
-- build that failed half way leaves an INVALID index behind and the
-- migration unrecorded; the drop makes the rerun start clean.
drop index concurrently if exists route_passport_outbox_published_idx;

create index concurrently route_passport_outbox_published_idx
    on route_passport_outbox (published_at)
    where status = 'PUBLISHED';

---- create above / drop below ----
---- tern: disable-tx ----

drop index concurrently if exists route_passport_outbox_published_idx;

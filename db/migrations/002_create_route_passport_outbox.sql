-- Transactional outbox: two rows per passport, written in the ingest
-- transaction and published by outbox-relay (contract §2, §3).
--
-- fillfactor leaves room on each page so that claim updates (which touch only
-- non-indexed columns: locked_until and lock_token) stay HOT and do
-- not rewrite index entries.
create table route_passport_outbox (
    id              uuid        primary key,
    route_id        uuid        not null references route_passports (route_id) on delete cascade,
    event_type      text        not null,
    topic           text        not null,
    message_key     text        not null,
    payload         jsonb       not null,
    headers         jsonb       not null default '{}'::jsonb,
    status          text        not null default 'PENDING'
                                check (status in ('PENDING', 'PUBLISHED', 'FAILED')),
    attempts        integer     not null default 0,
    max_attempts    integer     not null,
    next_attempt_at timestamptz not null default now(),
    locked_until    timestamptz,
    -- Set by each claim; every later state change must present it, so a relay
    -- whose lease expired cannot overwrite the work of the relay that took the
    -- row over.
    lock_token      uuid,
    last_error      text,
    created_at      timestamptz not null default now(),
    updated_at      timestamptz not null default now(),
    published_at    timestamptz,
    constraint route_passport_outbox_route_event_key unique (route_id, event_type)
) with (fillfactor = 70);

-- "Due PENDING rows, oldest first" stays cheap however many PUBLISHED rows the
-- table holds: only PENDING rows are in this index.
create index route_passport_outbox_pending_idx
    on route_passport_outbox (next_attempt_at, created_at)
    where status = 'PENDING';

-- Operators look at FAILED rows; they are few.
create index route_passport_outbox_failed_idx
    on route_passport_outbox (updated_at)
    where status = 'FAILED';

---- create above / drop below ----

drop table route_passport_outbox;

-- A single-row table that every outbox-relay reads each poll interval, so an
-- operator can pause all relays during a Kafka incident without a redeploy
-- (`outbox-relay pause` / `outbox-relay resume`).
create table outbox_relay_control (
    id         boolean     primary key default true check (id),
    paused     boolean     not null default false,
    reason     text,
    updated_by text,
    updated_at timestamptz not null default now()
);

insert into outbox_relay_control (id, paused) values (true, false);

---- create above / drop below ----

drop table outbox_relay_control;

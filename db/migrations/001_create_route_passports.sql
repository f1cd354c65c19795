-- Route passports: one row per routeId, last write wins (contract §3).
create table route_passports (
    route_id           uuid        primary key,
    route_name_full    text        not null,
    route_name_short   text        not null,
    ka_short           text        not null,
    ka_full            text        not null,
    orbit_number       bigint      not null check (orbit_number >= 0),
    orbit_state        text        not null,
    interval_begin     timestamptz not null,
    interval_end       timestamptz not null,
    roll_angle_min     double precision not null,
    roll_angle_max     double precision not null,
    visir_angle_min    double precision not null,
    visir_angle_max    double precision not null,
    resolution_range   double precision not null,
    resolution_azimuth double precision not null,
    polarisation       jsonb       not null default '[]'::jsonb,
    processing_level   text        not null,
    geometry_wkt       text        not null,
    route_status       text        not null,
    trace_id           text,
    correlation_id     text,
    source_topic       text        not null,
    source_partition   integer     not null,
    source_offset      bigint      not null,
    source_key         bytea,
    raw_payload        jsonb       not null,
    created_at         timestamptz not null default now(),
    updated_at         timestamptz not null default now(),
    constraint route_passports_interval_check check (interval_end >= interval_begin)
);

-- Queries by mission planning: "routes flying over a time window".
create index route_passports_interval_idx on route_passports (interval_begin, interval_end);
-- "routes of one spacecraft on one orbit".
create index route_passports_platform_orbit_idx on route_passports (ka_short, orbit_number);
create index route_passports_status_idx on route_passports (route_status);
-- Forensics: which input record produced this row. Deliberately not unique:
-- offsets start again at 0 when a topic is recreated (or a dev broker is
-- replaced), and a unique index would then make PostgreSQL reject good
-- passports whose offsets collide with an old row's.
create index route_passports_source_idx on route_passports (source_topic, source_partition, source_offset);

---- create above / drop below ----

drop table route_passports;

-- Passports and event payloads are large JSON/WKT documents that PostgreSQL
-- compresses when it TOASTs them. With the default pglz, compression took
-- about half of the server's CPU in the ingest benchmark; lz4 compresses
-- several times faster at a similar ratio. Only values written from now on
-- are affected. A server built without lz4 keeps pglz (a notice says so).
do $$
begin
    alter table route_passports
        alter column raw_payload set compression lz4,
        alter column geometry_wkt set compression lz4;
    alter table route_passport_outbox
        alter column payload set compression lz4;
exception when feature_not_supported then
    raise notice 'lz4 compression is not available in this server; keeping pglz';
end
$$;

---- create above / drop below ----

alter table route_passports
    alter column raw_payload set compression default,
    alter column geometry_wkt set compression default;
alter table route_passport_outbox
    alter column payload set compression default;

-- The input record's timestamp (its CreateTime, or LogAppendTime when the
-- topic sets that), NULL when the record had none. The ingestor's upsert
-- reads it to keep an older record of a route from replacing a newer one
-- of the same partition: a batch of a partition revoked while its write
-- was held up (waiting for a connection, or behind another session's row
-- lock) can commit after the partition's new owner wrote a later record of
-- the same route. Its offset is lower and its timestamp is before the
-- stored row's write; a recreated topic's records have lower offsets too,
-- but timestamps after it (see writeSQL in pkg/store/passports_write.go).
-- A row last written by a release before this one keeps the timestamp of
-- an earlier record, or none.
alter table route_passports add column source_timestamp timestamptz;

---- create above / drop below ----

alter table route_passports drop column source_timestamp;

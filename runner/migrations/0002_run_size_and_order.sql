-- The size of each run (its request and result JSON), for the retention policy by bytes, and
-- its time in microseconds, so runs finished within one second keep their order (newest first
-- for the history and for retention). The index covers the retention queries without reading
-- the rows.
ALTER TABLE runs ADD COLUMN bytes BIGINT NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN created_us BIGINT NOT NULL DEFAULT 0;
UPDATE runs SET bytes = LENGTH(request) + LENGTH(result), created_us = created_at * 1000000;
CREATE INDEX IF NOT EXISTS runs_retention ON runs (created_us, id, bytes);

-- Who made each link and the size of its program and state text, for the link quotas: bytes per
-- client within the last hour, and in total. Links from before have no client (''): they count
-- in the total only.
ALTER TABLE links ADD COLUMN client TEXT NOT NULL DEFAULT '';
ALTER TABLE links ADD COLUMN bytes BIGINT NOT NULL DEFAULT 0;
UPDATE links SET bytes = LENGTH(program) + LENGTH(state);
CREATE INDEX IF NOT EXISTS links_client ON links (client, created_at, bytes);

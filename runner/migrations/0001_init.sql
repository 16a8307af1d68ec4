-- The tables as the store first created them (IF NOT EXISTS: a database from before the
-- migrations already has them).
CREATE TABLE IF NOT EXISTS links (
    id TEXT PRIMARY KEY,
    program TEXT NOT NULL,
    state TEXT NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,
    created_at BIGINT NOT NULL,
    status TEXT NOT NULL,
    client TEXT NOT NULL,
    request TEXT NOT NULL,
    result TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS runs_created_at ON runs (created_at);

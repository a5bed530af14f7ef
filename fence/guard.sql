-- tickd's Postgres fence guard: the table of the highest fence that wrote
-- under each key, and tickd_fence(key, fence), which makes the fence the
-- highest or raises SQLSTATE TKD01 when a higher one wrote. Call it first
-- in the transaction whose writes it guards. It can be applied again.
--
--   psql -v ON_ERROR_STOP=1 -f /usr/share/tickd/fence-guard.sql
CREATE TABLE IF NOT EXISTS tickd_fences (
	key   text PRIMARY KEY,
	fence bigint NOT NULL CHECK (fence > 0),
	at    timestamptz NOT NULL DEFAULT now()
);
CREATE OR REPLACE FUNCTION tickd_fence(k text, f bigint) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
	got bigint;
BEGIN
	INSERT INTO tickd_fences AS t (key, fence) VALUES (k, f)
	ON CONFLICT (key) DO UPDATE SET fence = EXCLUDED.fence, at = now()
	WHERE t.fence <= EXCLUDED.fence
	RETURNING t.fence INTO got;
	IF got IS NULL THEN
		RAISE EXCEPTION 'tickd: stale fence % under %', f, k USING ERRCODE = 'TKD01';
	END IF;
	RETURN got;
END
$$;

-- Application keys, sessions, login throttling, rate limits (owner: pgshare).

-- Application keys: one per member per workspace; only the key's sha256
-- (hex) is kept. Every change, by trigd or by hand (a DELETE revokes),
-- notifies `trigd_app_keys`: each instance drops its cached copy then.
CREATE TABLE trigd_app_keys (
    workspace text NOT NULL,
    member text NOT NULL,
    sha256 text NOT NULL UNIQUE CHECK (sha256 ~ '^[0-9a-f]{64}$'),
    hint text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (workspace, member)
);
CREATE FUNCTION trigd_app_keys_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('trigd_app_keys', '');
    RETURN NULL;
END $$;
CREATE TRIGGER trigd_app_keys_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON trigd_app_keys
    FOR EACH STATEMENT EXECUTE FUNCTION trigd_app_keys_changed();

-- Login sessions, by the sha256 (hex) of their token; `password` is the
-- fingerprint of the user's password hash at login (a new password ends
-- the session). Times are the database's clock, so instances agree.
CREATE TABLE trigd_sessions (
    token_sha256 text PRIMARY KEY,
    username text NOT NULL,
    password text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    last_seen timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX trigd_sessions_last_seen ON trigd_sessions (last_seen);

-- Counting windows of the limiters shared by the cluster: failed logins
-- per user name (`login-user:<sha256>`) and per address (`login-addr:`),
-- failed authentications per address (`auth:`), and the requests of API
-- keys with `rate_per_minute` (`key:<name>`). A window starts at its first
-- hit and lasts a minute; `granted` is what the last statement handed out.
CREATE TABLE trigd_limits (
    name text PRIMARY KEY,
    window_start timestamptz NOT NULL,
    hits bigint NOT NULL,
    granted bigint NOT NULL
);
CREATE INDEX trigd_limits_window ON trigd_limits (window_start);

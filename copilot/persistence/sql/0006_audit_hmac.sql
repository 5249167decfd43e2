-- Invariant 6, hardened: audit rows are chained with an HMAC whose key lives outside the
-- database (each row names the key id it was chained with), and the application logs in
-- as a role that has only copilot_app's rights, so `RESET ROLE` gains it nothing.

-- Rows written before this migration keep their unkeyed sha256 chain (key_id NULL); from
-- now on every row must name its key. The bound is this database's current last id.
ALTER TABLE audit_log ADD COLUMN key_id text
    CONSTRAINT audit_key_id_format CHECK (key_id ~ '^[A-Za-z0-9._-]{1,64}$');

DO $$
DECLARE
    legacy_last_id bigint;
BEGIN
    SELECT coalesce(max(id), 0) INTO legacy_last_id FROM audit_log;
    EXECUTE format(
        'ALTER TABLE audit_log ADD CONSTRAINT audit_rows_are_keyed CHECK (key_id IS NOT NULL OR id <= %s)',
        legacy_last_id
    );
END
$$;

-- The login the application's pool uses when DATABASE_URL is a superuser or the owner
-- (the embedded default, tests): a member of copilot_app and nothing else. Roles are
-- cluster-wide, so tolerate a concurrent creator from another database's migrator.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'copilot_app_login') THEN
        BEGIN
            CREATE ROLE copilot_app_login LOGIN INHERIT
                NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS
                IN ROLE copilot_app;
        EXCEPTION WHEN duplicate_object OR unique_violation THEN
            NULL;  -- another database's migrator created it first
        END;
    END IF;
    IF EXISTS (
        SELECT 1 FROM pg_roles WHERE rolname = 'copilot_app_login'
           AND (rolsuper OR rolcreaterole OR rolcreatedb OR rolreplication OR rolbypassrls)
    ) THEN
        RAISE EXCEPTION 'role copilot_app_login has more than copilot_app''s rights'
            USING HINT = 'the application must not log in as a privileged role: ALTER ROLE copilot_app_login '
                         'NOSUPERUSER NOCREATEROLE NOCREATEDB NOREPLICATION NOBYPASSRLS';
    END IF;
    IF NOT pg_has_role('copilot_app_login', 'copilot_app', 'MEMBER') THEN
        GRANT copilot_app TO copilot_app_login;
    END IF;
END
$$;

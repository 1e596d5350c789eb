package store

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
)

// migration is one step of the schema; its SQL may use {{serial}}.
type migration struct {
	version int
	name    string
	stmts   []string
}

// migrations is the schema's history. Append; never edit a released step.
var migrations = []migration{
	{1, "initial schema", []string{
		`CREATE TABLE state (id INTEGER PRIMARY KEY, version BIGINT NOT NULL, document TEXT NOT NULL, updated_at BIGINT NOT NULL)`,
		`INSERT INTO state (id, version, document, updated_at) VALUES (1, 0, 'rules: {}', 0)`,
		`CREATE TABLE teams (name TEXT PRIMARY KEY, created_at BIGINT NOT NULL, version BIGINT NOT NULL DEFAULT 0)`,
		`CREATE TABLE tokens (id TEXT PRIMARY KEY, team TEXT NOT NULL, name TEXT NOT NULL, hash TEXT NOT NULL UNIQUE, created_at BIGINT NOT NULL, revoked_at BIGINT)`,
		`CREATE INDEX tokens_team ON tokens (team)`,
		`CREATE TABLE rules (team TEXT NOT NULL, name TEXT NOT NULL, spec TEXT NOT NULL, version BIGINT NOT NULL, updated_at BIGINT NOT NULL, PRIMARY KEY (team, name))`,
		`CREATE TABLE history (version BIGINT PRIMARY KEY, team TEXT NOT NULL, at BIGINT NOT NULL, actor TEXT NOT NULL, token_id TEXT NOT NULL, action TEXT NOT NULL, rule TEXT NOT NULL, document TEXT NOT NULL)`,
		`CREATE INDEX history_team ON history (team, version)`,
		`CREATE TABLE audit (id {{serial}}, at BIGINT NOT NULL, actor TEXT NOT NULL, token_id TEXT NOT NULL, action TEXT NOT NULL, team TEXT NOT NULL, rule TEXT NOT NULL, version BIGINT NOT NULL, before_text TEXT NOT NULL, after_text TEXT NOT NULL)`,
		`CREATE INDEX audit_team ON audit (team, id)`,
	}},
}

// SchemaVersion is the schema version this build migrates to.
func SchemaVersion() int { return migrations[len(migrations)-1].version }

// migrate brings the schema up to date in one transaction, serialized with
// every other change (and with another process migrating the same database).
func (s *Store) migrate(ctx context.Context) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("migrate: begin: %w", err)
	}
	defer tx.Rollback()
	if s.d == postgresDialect {
		// Two replicas starting at once: the second waits here, then sees
		// the first's schema_migrations.
		if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(7380019)`); err != nil {
			return fmt.Errorf("migrate: lock: %w", err)
		}
	}
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at BIGINT NOT NULL)`); err != nil {
		return fmt.Errorf("migrate: create schema_migrations: %w", err)
	}
	var have int
	if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&have); err != nil {
		return fmt.Errorf("migrate: read schema version: %w", err)
	}
	if have > SchemaVersion() {
		return fmt.Errorf("migrate: the database's schema is version %d, newer than this build's %d: run a newer sluice-rules", have, SchemaVersion())
	}
	for _, m := range migrations {
		if m.version <= have {
			continue
		}
		for _, stmt := range m.stmts {
			stmt = strings.ReplaceAll(stmt, "{{serial}}", s.d.serial())
			if _, err := tx.ExecContext(ctx, stmt); err != nil {
				return fmt.Errorf("migrate to %d (%s): %w", m.version, m.name, err)
			}
		}
		if _, err := tx.ExecContext(ctx, s.d.rebind(`INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`), m.version, m.name, s.now().UnixMicro()); err != nil {
			return fmt.Errorf("migrate to %d: record: %w", m.version, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migrate: commit: %w", err)
	}
	return nil
}

// migratedVersion returns the schema version recorded in the database.
func (s *Store) migratedVersion(ctx context.Context) (int, error) {
	var v int
	err := s.db.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&v)
	if err == sql.ErrNoRows {
		return 0, nil
	}
	return v, err
}

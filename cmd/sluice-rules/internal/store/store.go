package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers "pgx"
	_ "modernc.org/sqlite"             // registers "sqlite"
)

// Sentinels callers branch on.
var (
	// ErrNotFound: no such team, rule, token or version.
	ErrNotFound = errors.New("not found")
	// ErrExists: the team (or token id) exists already.
	ErrExists = errors.New("exists already")
)

// Store is the database. It is safe for concurrent use.
type Store struct {
	db  *sql.DB
	d   dialect
	now func() time.Time
}

// Open opens (creating if needed) the database dbURL names and migrates its
// schema: "postgres://..." or "postgresql://..." for PostgreSQL (any
// libpq-style URL pgx accepts), "sqlite:///abs/path.db", "sqlite:rel.db" or
// a plain file path for SQLite.
func Open(ctx context.Context, dbURL string) (*Store, error) {
	s := &Store{now: time.Now}
	var err error
	switch {
	case strings.HasPrefix(dbURL, "postgres://"), strings.HasPrefix(dbURL, "postgresql://"):
		s.d = postgresDialect
		s.db, err = sql.Open("pgx", dbURL)
		if err == nil {
			s.db.SetMaxOpenConns(16)
		}
	default:
		s.d = sqliteDialect
		path := strings.TrimPrefix(strings.TrimPrefix(dbURL, "sqlite://"), "sqlite:")
		if path == "" {
			return nil, fmt.Errorf("open store: no SQLite file in %q", dbURL)
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, fmt.Errorf("open store: %w", err)
		}
		// Writers take the lock at BEGIN (so a change never fails halfway
		// on a busy database), wait up to 10 s for it, and readers go on
		// beside the writer (WAL).
		q := url.Values{}
		q.Set("_txlock", "immediate")
		q.Add("_pragma", "busy_timeout(10000)")
		q.Add("_pragma", "journal_mode(WAL)")
		q.Add("_pragma", "synchronous(FULL)")
		s.db, err = sql.Open("sqlite", "file:"+path+"?"+q.Encode())
		if err == nil {
			s.db.SetMaxOpenConns(8)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("open store (%s): %w", s.d, err)
	}
	if err := s.db.PingContext(ctx); err != nil {
		s.db.Close()
		return nil, fmt.Errorf("open store (%s): %w", s.d, err)
	}
	if err := s.migrate(ctx); err != nil {
		s.db.Close()
		return nil, fmt.Errorf("open store (%s): %w", s.d, err)
	}
	return s, nil
}

// Dialect names the database: "sqlite" or "postgres".
func (s *Store) Dialect() string { return s.d.String() }

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

// Ping reports whether the database answers.
func (s *Store) Ping(ctx context.Context) error { return s.db.PingContext(ctx) }

// Read returns a Tx reading outside any transaction: each call sees the
// latest committed state. Its write methods must not be used.
func (s *Store) Read() *Tx { return &Tx{q: s.db, d: s.d} }

// Change runs fn in a write transaction serialized with every other
// change, committing if it returns nil and rolling back otherwise (fn's
// error is returned as it is).
func (s *Store) Change(ctx context.Context, fn func(tx *Tx) error) error {
	sqlTx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("store change: begin: %w", err)
	}
	defer sqlTx.Rollback()
	tx := &Tx{q: sqlTx, d: s.d, locked: true}
	if s.d == postgresDialect {
		if _, err := sqlTx.ExecContext(ctx, `SELECT 1 FROM state WHERE id = 1 FOR UPDATE`); err != nil {
			return fmt.Errorf("store change: lock: %w", err)
		}
	}
	if err := fn(tx); err != nil {
		return err
	}
	if err := sqlTx.Commit(); err != nil {
		return fmt.Errorf("store change: commit: %w", err)
	}
	return nil
}

// Backup writes a consistent copy of a SQLite database to path (which
// must not exist), with VACUUM INTO, while the service runs. PostgreSQL
// databases are backed up with pg_dump instead.
func (s *Store) Backup(ctx context.Context, path string) error {
	if s.d != sqliteDialect {
		return fmt.Errorf("backup: the service backs up SQLite only; use pg_dump for PostgreSQL")
	}
	if _, err := s.db.ExecContext(ctx, `VACUUM INTO ?`, path); err != nil {
		return fmt.Errorf("backup to %s: %w", path, err)
	}
	return nil
}

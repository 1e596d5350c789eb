package store

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/cmd/sluice-rules/internal/pgtest"
	"github.com/sluicelabs/sluice/internal/rulesapi"
)

func TestMain(m *testing.M) {
	code := m.Run()
	pgtest.Stop()
	os.Exit(code)
}

// backends runs f against a fresh SQLite and a fresh PostgreSQL database.
func backends(t *testing.T, f func(t *testing.T, url string)) {
	t.Run("sqlite", func(t *testing.T) { f(t, "sqlite://"+filepath.Join(t.TempDir(), "rules.db")) })
	t.Run("postgres", func(t *testing.T) { f(t, pgtest.URL(t)) })
}

func open(t *testing.T, url string) *Store {
	t.Helper()
	s, err := Open(context.Background(), url)
	if err != nil {
		t.Fatalf("Open(%s): %v", url, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestMigrationsRunOnceAndReopen(t *testing.T) {
	backends(t, func(t *testing.T, url string) {
		ctx := context.Background()
		s := open(t, url)
		if v, err := s.migratedVersion(ctx); err != nil || v != SchemaVersion() {
			t.Fatalf("schema version = %d, %v; want %d", v, err, SchemaVersion())
		}
		served, err := s.Read().Served(ctx)
		if err != nil || served.Version != 0 || served.Document != "rules: {}" {
			t.Fatalf("initial served = %+v, %v", served, err)
		}
		// A change, then a second Open (a restart) migrates nothing and
		// keeps the data.
		if err := s.Change(ctx, func(tx *Tx) error { return tx.CreateTeam(ctx, "pay", time.Unix(100, 0)) }); err != nil {
			t.Fatal(err)
		}
		s.Close()
		s2 := open(t, url)
		if _, err := s2.Read().Team(ctx, "pay"); err != nil {
			t.Fatalf("team lost across reopen: %v", err)
		}
		var n int
		if err := s2.db.QueryRow(`SELECT COUNT(*) FROM schema_migrations`).Scan(&n); err != nil || n != len(migrations) {
			t.Fatalf("schema_migrations rows = %d, %v; want %d", n, err, len(migrations))
		}
	})
}

func TestRefusesNewerSchema(t *testing.T) {
	backends(t, func(t *testing.T, url string) {
		ctx := context.Background()
		s := open(t, url)
		if _, err := s.db.Exec(s.d.rebind(`INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, 'future', 0)`), SchemaVersion()+1); err != nil {
			t.Fatal(err)
		}
		s.Close()
		if _, err := Open(ctx, url); err == nil {
			t.Fatal("Open of a database with a newer schema succeeded")
		}
	})
}

func TestTablesRoundTrip(t *testing.T) {
	backends(t, func(t *testing.T, url string) {
		ctx := context.Background()
		s := open(t, url)
		at := time.UnixMicro(1_700_000_000_123_456).UTC()
		steps := []struct {
			name string
			fn   func(tx *Tx) error
			want error
		}{
			{"create team", func(tx *Tx) error { return tx.CreateTeam(ctx, "pay", at) }, nil},
			{"create it again", func(tx *Tx) error { return tx.CreateTeam(ctx, "pay", at) }, ErrExists},
			{"create team 2", func(tx *Tx) error { return tx.CreateTeam(ctx, "web", at) }, nil},
			{"put rule", func(tx *Tx) error {
				return tx.PutRule(ctx, rulesapi.Rule{Team: "pay", Name: "api", Spec: "rate: 1/1s\n", Version: 1, UpdatedAt: at})
			}, nil},
			{"replace rule", func(tx *Tx) error {
				return tx.PutRule(ctx, rulesapi.Rule{Team: "pay", Name: "api", Spec: "rate: 2/1s\n", Version: 2, UpdatedAt: at})
			}, nil},
			{"put rule 2", func(tx *Tx) error {
				return tx.PutRule(ctx, rulesapi.Rule{Team: "web", Name: "login", Spec: "rate: 5/1m\n", Version: 3, UpdatedAt: at})
			}, nil},
			{"served", func(tx *Tx) error {
				return tx.SetServed(ctx, Served{Version: 3, Document: "rules:\n  pay.api: {rate: 2/1s}\n", UpdatedAt: at})
			}, nil},
			{"history", func(tx *Tx) error {
				return tx.AddHistory(ctx, "pay", rulesapi.HistoryEntry{Version: 2, At: at, Actor: "team:pay", TokenID: "t1", Action: rulesapi.ActionUpdate, Rule: "api", Document: "doc2"})
			}, nil},
			{"audit", func(tx *Tx) error {
				return tx.AddAudit(ctx, rulesapi.AuditEntry{At: at, Actor: "admin", TokenID: "a", Action: rulesapi.ActionTeamCreate, Team: "pay", After: "team pay"})
			}, nil},
			{"audit 2", func(tx *Tx) error {
				return tx.AddAudit(ctx, rulesapi.AuditEntry{At: at, Actor: "team:pay", TokenID: "t1", Action: rulesapi.ActionUpdate, Team: "pay", Rule: "api", Version: 2, Before: "a", After: "b"})
			}, nil},
			{"token", func(tx *Tx) error {
				return tx.CreateToken(ctx, TokenRecord{Token: rulesapi.Token{ID: "t1", Team: "pay", Name: "ci", CreatedAt: at}, Hash: "h1"})
			}, nil},
			{"token same hash", func(tx *Tx) error {
				return tx.CreateToken(ctx, TokenRecord{Token: rulesapi.Token{ID: "t2", Team: "pay", Name: "ci", CreatedAt: at}, Hash: "h1"})
			}, ErrExists},
			{"revoke unknown", func(tx *Tx) error { return tx.RevokeToken(ctx, "pay", "nope", at) }, ErrNotFound},
			{"read write outside change", func(*Tx) error {
				return s.Read().DeleteRule(ctx, "pay", "api")
			}, errAny},
		}
		for _, st := range steps {
			err := s.Change(ctx, st.fn)
			switch {
			case st.want == errAny && err == nil:
				t.Errorf("%s: no error", st.name)
			case st.want != errAny && !errors.Is(err, st.want):
				t.Errorf("%s: error %v, want %v", st.name, err, st.want)
			}
		}
		r := s.Read()
		rule, err := r.Rule(ctx, "pay", "api")
		if err != nil || rule.Spec != "rate: 2/1s\n" || rule.Version != 2 || !rule.UpdatedAt.Equal(at) || rule.Served != "pay.api" {
			t.Errorf("Rule = %+v, %v", rule, err)
		}
		if all, err := r.AllRules(ctx); err != nil || len(all) != 2 || all[0].Team != "pay" || all[1].Team != "web" {
			t.Errorf("AllRules = %+v, %v", all, err)
		}
		if teams, err := r.Teams(ctx); err != nil || len(teams) != 2 || teams[0].Rules != 1 {
			t.Errorf("Teams = %+v, %v", teams, err)
		}
		if served, err := r.Served(ctx); err != nil || served.Version != 3 {
			t.Errorf("Served = %+v, %v", served, err)
		}
		if h, err := r.HistoryAt(ctx, "pay", 5); err != nil || h.Document != "doc2" {
			t.Errorf("HistoryAt(5) = %+v, %v", h, err)
		}
		if _, err := r.HistoryAt(ctx, "pay", 1); !errors.Is(err, ErrNotFound) {
			t.Errorf("HistoryAt(1) = %v, want ErrNotFound", err)
		}
		if a, err := r.Audit(ctx, "", 0, 10); err != nil || len(a) != 2 || a[0].Action != rulesapi.ActionUpdate || a[0].Before != "a" {
			t.Errorf("Audit = %+v, %v", a, err)
		}
		if a, err := r.Audit(ctx, "pay", 2, 10); err != nil || len(a) != 1 || a[0].ID != 1 {
			t.Errorf("Audit(before 2) = %+v, %v", a, err)
		}
		if tk, err := r.TokenByHash(ctx, "h1"); err != nil || tk.ID != "t1" || tk.Team != "pay" {
			t.Errorf("TokenByHash = %+v, %v", tk, err)
		}
		if err := s.Change(ctx, func(tx *Tx) error { return tx.RevokeToken(ctx, "pay", "t1", at) }); err != nil {
			t.Fatal(err)
		}
		if _, err := r.TokenByHash(ctx, "h1"); !errors.Is(err, ErrNotFound) {
			t.Errorf("revoked token still found: %v", err)
		}
		if err := s.Change(ctx, func(tx *Tx) error { return tx.DeleteTeam(ctx, "pay") }); err != nil {
			t.Fatal(err)
		}
		if all, err := r.AllRules(ctx); err != nil || len(all) != 1 {
			t.Errorf("after team delete AllRules = %+v, %v", all, err)
		}
	})
}

// errAny marks a step that must fail, whatever the error.
var errAny = errors.New("any error")

func TestChangeRollsBackOnError(t *testing.T) {
	backends(t, func(t *testing.T, url string) {
		ctx := context.Background()
		s := open(t, url)
		boom := errors.New("boom")
		err := s.Change(ctx, func(tx *Tx) error {
			if err := tx.CreateTeam(ctx, "pay", time.Now()); err != nil {
				return err
			}
			return boom
		})
		if !errors.Is(err, boom) {
			t.Fatalf("Change = %v", err)
		}
		if _, err := s.Read().Team(ctx, "pay"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("rolled-back team exists: %v", err)
		}
	})
}

// TestChangesAreSerialized: concurrent read-modify-write changes of the
// version never lose an increment.
func TestChangesAreSerialized(t *testing.T) {
	backends(t, func(t *testing.T, url string) {
		ctx := context.Background()
		s := open(t, url)
		const workers, each = 4, 10
		var wg sync.WaitGroup
		errs := make(chan error, workers*each)
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range each {
					errs <- s.Change(ctx, func(tx *Tx) error {
						v, err := tx.ServedVersion(ctx)
						if err != nil {
							return err
						}
						return tx.SetServed(ctx, Served{Version: v + 1, Document: "rules: {}", UpdatedAt: time.Now()})
					})
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		if v, err := s.Read().ServedVersion(ctx); err != nil || v != workers*each {
			t.Fatalf("version = %d, %v; want %d", v, err, workers*each)
		}
	})
}

func TestSQLiteBackupRestores(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := open(t, "sqlite://"+filepath.Join(dir, "rules.db"))
	if err := s.Change(ctx, func(tx *Tx) error { return tx.CreateTeam(ctx, "pay", time.Now()) }); err != nil {
		t.Fatal(err)
	}
	backup := filepath.Join(dir, "backup.db")
	if err := s.Backup(ctx, backup); err != nil {
		t.Fatal(err)
	}
	restored := open(t, backup) // a plain path is a SQLite file too
	if _, err := restored.Read().Team(ctx, "pay"); err != nil {
		t.Fatalf("restored backup lacks the team: %v", err)
	}
}

package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/sluicelabs/sluice/internal/rulesapi"
)

// querier is what *sql.DB and *sql.Tx share.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Tx reads and writes the tables: within Store.Change, a write
// transaction; from Store.Read, plain reads. It is not safe for
// concurrent use.
type Tx struct {
	q      querier
	d      dialect
	locked bool
}

func (t *Tx) exec(ctx context.Context, what, q string, args ...any) (sql.Result, error) {
	if !t.locked {
		return nil, fmt.Errorf("%s: write outside Store.Change", what)
	}
	r, err := t.q.ExecContext(ctx, t.d.rebind(q), args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return r, nil
}

func (t *Tx) query(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	return t.q.QueryContext(ctx, t.d.rebind(q), args...)
}

func (t *Tx) row(ctx context.Context, q string, args ...any) *sql.Row {
	return t.q.QueryRowContext(ctx, t.d.rebind(q), args...)
}

func micros(t time.Time) int64 { return t.UnixMicro() }

func fromMicros(us int64) time.Time { return time.UnixMicro(us).UTC() }

// Served is the document daemons are served: the latest version.
type Served struct {
	Version   int64
	Document  string
	UpdatedAt time.Time
}

// Served returns the current served document and its version.
func (t *Tx) Served(ctx context.Context) (Served, error) {
	var s Served
	var at int64
	if err := t.row(ctx, `SELECT version, document, updated_at FROM state WHERE id = 1`).Scan(&s.Version, &s.Document, &at); err != nil {
		return Served{}, fmt.Errorf("read served document: %w", err)
	}
	s.UpdatedAt = fromMicros(at)
	return s, nil
}

// ServedVersion returns the current version alone.
func (t *Tx) ServedVersion(ctx context.Context) (int64, error) {
	var v int64
	if err := t.row(ctx, `SELECT version FROM state WHERE id = 1`).Scan(&v); err != nil {
		return 0, fmt.Errorf("read version: %w", err)
	}
	return v, nil
}

// SetServed stores a new served document as version s.Version.
func (t *Tx) SetServed(ctx context.Context, s Served) error {
	_, err := t.exec(ctx, "store served document", `UPDATE state SET version = ?, document = ?, updated_at = ? WHERE id = 1`, s.Version, s.Document, micros(s.UpdatedAt))
	return err
}

// Team returns a team, with its rule count; ErrNotFound if none.
func (t *Tx) Team(ctx context.Context, name string) (rulesapi.Team, error) {
	var tm rulesapi.Team
	var at int64
	err := t.row(ctx, `SELECT name, created_at, version, (SELECT COUNT(*) FROM rules WHERE rules.team = teams.name) FROM teams WHERE name = ?`, name).Scan(&tm.Name, &at, &tm.Version, &tm.Rules)
	if errors.Is(err, sql.ErrNoRows) {
		return rulesapi.Team{}, fmt.Errorf("team %s: %w", name, ErrNotFound)
	}
	if err != nil {
		return rulesapi.Team{}, fmt.Errorf("read team %s: %w", name, err)
	}
	tm.CreatedAt = fromMicros(at)
	return tm, nil
}

// Teams returns every team, by name.
func (t *Tx) Teams(ctx context.Context) ([]rulesapi.Team, error) {
	rows, err := t.query(ctx, `SELECT name, created_at, version, (SELECT COUNT(*) FROM rules WHERE rules.team = teams.name) FROM teams ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list teams: %w", err)
	}
	defer rows.Close()
	teams := []rulesapi.Team{}
	for rows.Next() {
		var tm rulesapi.Team
		var at int64
		if err := rows.Scan(&tm.Name, &at, &tm.Version, &tm.Rules); err != nil {
			return nil, fmt.Errorf("list teams: %w", err)
		}
		tm.CreatedAt = fromMicros(at)
		teams = append(teams, tm)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list teams: %w", err)
	}
	return teams, nil
}

// CreateTeam adds a team; ErrExists if it exists.
func (t *Tx) CreateTeam(ctx context.Context, name string, at time.Time) error {
	if _, err := t.Team(ctx, name); err == nil {
		return fmt.Errorf("create team %s: %w", name, ErrExists)
	} else if !errors.Is(err, ErrNotFound) {
		return err
	}
	_, err := t.exec(ctx, "create team "+name, `INSERT INTO teams (name, created_at, version) VALUES (?, ?, 0)`, name, micros(at))
	return err
}

// DeleteTeam removes a team with its rules and tokens (its history and
// audit entries stay).
func (t *Tx) DeleteTeam(ctx context.Context, name string) error {
	for _, q := range []string{`DELETE FROM rules WHERE team = ?`, `DELETE FROM tokens WHERE team = ?`, `DELETE FROM teams WHERE name = ?`} {
		if _, err := t.exec(ctx, "delete team "+name, q, name); err != nil {
			return err
		}
	}
	return nil
}

// SetTeamVersion records the version that last changed a team's rules.
func (t *Tx) SetTeamVersion(ctx context.Context, team string, version int64) error {
	_, err := t.exec(ctx, "set team version", `UPDATE teams SET version = ? WHERE name = ?`, version, team)
	return err
}

func (t *Tx) scanRules(rows *sql.Rows, err error) ([]rulesapi.Rule, error) {
	if err != nil {
		return nil, fmt.Errorf("read rules: %w", err)
	}
	defer rows.Close()
	rules := []rulesapi.Rule{}
	for rows.Next() {
		var r rulesapi.Rule
		var at int64
		if err := rows.Scan(&r.Team, &r.Name, &r.Spec, &r.Version, &at); err != nil {
			return nil, fmt.Errorf("read rules: %w", err)
		}
		r.UpdatedAt = fromMicros(at)
		r.Served = r.Team + "." + r.Name
		rules = append(rules, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read rules: %w", err)
	}
	return rules, nil
}

// TeamRules returns a team's rules by name.
func (t *Tx) TeamRules(ctx context.Context, team string) ([]rulesapi.Rule, error) {
	return t.scanRules(t.query(ctx, `SELECT team, name, spec, version, updated_at FROM rules WHERE team = ? ORDER BY name`, team))
}

// AllRules returns every team's rules, by team and name.
func (t *Tx) AllRules(ctx context.Context) ([]rulesapi.Rule, error) {
	return t.scanRules(t.query(ctx, `SELECT team, name, spec, version, updated_at FROM rules ORDER BY team, name`))
}

// Rule returns one rule; ErrNotFound if none.
func (t *Tx) Rule(ctx context.Context, team, name string) (rulesapi.Rule, error) {
	rules, err := t.scanRules(t.query(ctx, `SELECT team, name, spec, version, updated_at FROM rules WHERE team = ? AND name = ?`, team, name))
	if err != nil {
		return rulesapi.Rule{}, err
	}
	if len(rules) == 0 {
		return rulesapi.Rule{}, fmt.Errorf("rule %s.%s: %w", team, name, ErrNotFound)
	}
	return rules[0], nil
}

// PutRule creates or replaces a rule.
func (t *Tx) PutRule(ctx context.Context, r rulesapi.Rule) error {
	what := "store rule " + r.Team + "." + r.Name
	if _, err := t.exec(ctx, what, `DELETE FROM rules WHERE team = ? AND name = ?`, r.Team, r.Name); err != nil {
		return err
	}
	_, err := t.exec(ctx, what, `INSERT INTO rules (team, name, spec, version, updated_at) VALUES (?, ?, ?, ?, ?)`, r.Team, r.Name, r.Spec, r.Version, micros(r.UpdatedAt))
	return err
}

// DeleteRule removes a rule (nothing if there is none).
func (t *Tx) DeleteRule(ctx context.Context, team, name string) error {
	_, err := t.exec(ctx, "delete rule "+team+"."+name, `DELETE FROM rules WHERE team = ? AND name = ?`, team, name)
	return err
}

// AddHistory records a version of a team's rules.
func (t *Tx) AddHistory(ctx context.Context, team string, h rulesapi.HistoryEntry) error {
	_, err := t.exec(ctx, "record history", `INSERT INTO history (version, team, at, actor, token_id, action, rule, document) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
		h.Version, team, micros(h.At), h.Actor, h.TokenID, h.Action, h.Rule, h.Document)
	return err
}

const historyCols = `version, at, actor, token_id, action, rule, document`

func scanHistory(rows *sql.Rows, err error) ([]rulesapi.HistoryEntry, error) {
	if err != nil {
		return nil, fmt.Errorf("read history: %w", err)
	}
	defer rows.Close()
	out := []rulesapi.HistoryEntry{}
	for rows.Next() {
		var h rulesapi.HistoryEntry
		var at int64
		if err := rows.Scan(&h.Version, &at, &h.Actor, &h.TokenID, &h.Action, &h.Rule, &h.Document); err != nil {
			return nil, fmt.Errorf("read history: %w", err)
		}
		h.At = fromMicros(at)
		out = append(out, h)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read history: %w", err)
	}
	return out, nil
}

// History returns up to limit versions of a team's rules, newest first.
func (t *Tx) History(ctx context.Context, team string, limit int) ([]rulesapi.HistoryEntry, error) {
	return scanHistory(t.query(ctx, `SELECT `+historyCols+` FROM history WHERE team = ? ORDER BY version DESC LIMIT ?`, team, limit))
}

// HistoryAt returns the team's latest version at or before version;
// ErrNotFound if the team had none by then.
func (t *Tx) HistoryAt(ctx context.Context, team string, version int64) (rulesapi.HistoryEntry, error) {
	h, err := scanHistory(t.query(ctx, `SELECT `+historyCols+` FROM history WHERE team = ? AND version <= ? ORDER BY version DESC LIMIT 1`, team, version))
	if err != nil {
		return rulesapi.HistoryEntry{}, err
	}
	if len(h) == 0 {
		return rulesapi.HistoryEntry{}, fmt.Errorf("history of %s at version %d: %w", team, version, ErrNotFound)
	}
	return h[0], nil
}

// AddAudit appends to the audit log, returning the entry's id.
func (t *Tx) AddAudit(ctx context.Context, e rulesapi.AuditEntry) error {
	_, err := t.exec(ctx, "record audit", `INSERT INTO audit (at, actor, token_id, action, team, rule, version, before_text, after_text) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		micros(e.At), e.Actor, e.TokenID, e.Action, e.Team, e.Rule, e.Version, e.Before, e.After)
	return err
}

// Audit returns up to limit entries, newest first, of one team (all when
// team is empty), with ids below before (all when before is 0).
func (t *Tx) Audit(ctx context.Context, team string, before int64, limit int) ([]rulesapi.AuditEntry, error) {
	q := `SELECT id, at, actor, token_id, action, team, rule, version, before_text, after_text FROM audit WHERE (? = '' OR team = ?) AND (? = 0 OR id < ?) ORDER BY id DESC LIMIT ?`
	rows, err := t.query(ctx, q, team, team, before, before, limit)
	if err != nil {
		return nil, fmt.Errorf("read audit log: %w", err)
	}
	defer rows.Close()
	out := []rulesapi.AuditEntry{}
	for rows.Next() {
		var e rulesapi.AuditEntry
		var at int64
		if err := rows.Scan(&e.ID, &at, &e.Actor, &e.TokenID, &e.Action, &e.Team, &e.Rule, &e.Version, &e.Before, &e.After); err != nil {
			return nil, fmt.Errorf("read audit log: %w", err)
		}
		e.At = fromMicros(at)
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read audit log: %w", err)
	}
	return out, nil
}

// TokenRecord is a stored token: its description and its SHA-256.
type TokenRecord struct {
	rulesapi.Token
	// Hash is the hex SHA-256 of the token's secret.
	Hash string
}

// AdminTeam is the Team column of admin tokens.
const AdminTeam = ""

// CreateToken stores a token; ErrExists if its id or hash is taken.
func (t *Tx) CreateToken(ctx context.Context, tok TokenRecord) error {
	var n int
	if err := t.row(ctx, `SELECT COUNT(*) FROM tokens WHERE id = ? OR hash = ?`, tok.ID, tok.Hash).Scan(&n); err != nil {
		return fmt.Errorf("create token: %w", err)
	}
	if n > 0 {
		return fmt.Errorf("create token %s: %w", tok.ID, ErrExists)
	}
	_, err := t.exec(ctx, "create token", `INSERT INTO tokens (id, team, name, hash, created_at) VALUES (?, ?, ?, ?, ?)`, tok.ID, tok.Team, tok.Name, tok.Hash, micros(tok.CreatedAt))
	return err
}

// RevokeToken marks a team's token revoked; ErrNotFound if it has no such
// live token.
func (t *Tx) RevokeToken(ctx context.Context, team, id string, at time.Time) error {
	r, err := t.exec(ctx, "revoke token "+id, `UPDATE tokens SET revoked_at = ? WHERE id = ? AND team = ? AND revoked_at IS NULL`, micros(at), id, team)
	if err != nil {
		return err
	}
	if n, err := r.RowsAffected(); err == nil && n == 0 {
		return fmt.Errorf("revoke token %s: %w", id, ErrNotFound)
	}
	return nil
}

const tokenCols = `id, team, name, hash, created_at, revoked_at`

func scanTokens(rows *sql.Rows, err error) ([]TokenRecord, error) {
	if err != nil {
		return nil, fmt.Errorf("read tokens: %w", err)
	}
	defer rows.Close()
	out := []TokenRecord{}
	for rows.Next() {
		var tk TokenRecord
		var at int64
		var revoked sql.NullInt64
		if err := rows.Scan(&tk.ID, &tk.Team, &tk.Name, &tk.Hash, &at, &revoked); err != nil {
			return nil, fmt.Errorf("read tokens: %w", err)
		}
		tk.CreatedAt = fromMicros(at)
		if revoked.Valid {
			r := fromMicros(revoked.Int64)
			tk.RevokedAt = &r
		}
		out = append(out, tk)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read tokens: %w", err)
	}
	return out, nil
}

// TokenByHash returns the live token with that hash; ErrNotFound if none.
func (t *Tx) TokenByHash(ctx context.Context, hash string) (TokenRecord, error) {
	toks, err := scanTokens(t.query(ctx, `SELECT `+tokenCols+` FROM tokens WHERE hash = ? AND revoked_at IS NULL`, hash))
	if err != nil {
		return TokenRecord{}, err
	}
	if len(toks) == 0 {
		return TokenRecord{}, fmt.Errorf("token: %w", ErrNotFound)
	}
	return toks[0], nil
}

// Tokens returns a team's tokens (AdminTeam: the admin tokens), oldest first.
func (t *Tx) Tokens(ctx context.Context, team string) ([]TokenRecord, error) {
	return scanTokens(t.query(ctx, `SELECT `+tokenCols+` FROM tokens WHERE team = ? ORDER BY created_at, id`, team))
}

package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"

	"github.com/sluicelabs/sluice/cmd/sluice-rules/internal/ruledoc"
	"github.com/sluicelabs/sluice/cmd/sluice-rules/internal/store"
	"github.com/sluicelabs/sluice/config"
	"github.com/sluicelabs/sluice/internal/rulesapi"
)

func (s *Server) whoami(w http.ResponseWriter, r *http.Request, a actor) error {
	kind := rulesapi.ActorTeam
	if a.admin() {
		kind = rulesapi.ActorAdmin
	}
	writeJSON(w, http.StatusOK, rulesapi.WhoAmI{Kind: kind, Team: a.team, TokenID: a.tokenID})
	return nil
}

func (s *Server) status(w http.ResponseWriter, r *http.Request, a actor) error {
	cur := s.current()
	teams, err := s.store.Read().Teams(r.Context())
	if err != nil {
		return err
	}
	n := 0
	for _, t := range teams {
		n += t.Rules
	}
	writeJSON(w, http.StatusOK, rulesapi.Status{Version: cur.version, ETag: cur.etag, UpdatedAt: cur.updatedAt, Rules: n, Teams: len(teams)})
	return nil
}

// pathName reads and checks a team or rule name from the path.
func pathName(r *http.Request, what string) (string, error) {
	name := r.PathValue(what)
	if err := ruledoc.CheckName(what, name); err != nil {
		return "", errorf(http.StatusBadRequest, rulesapi.CodeBadRequest, "%v", err)
	}
	return name, nil
}

// teamOf reads the path's team and checks the actor may touch it.
func teamOf(r *http.Request, a actor) (string, error) {
	team, err := pathName(r, "team")
	if err != nil {
		return "", err
	}
	return team, mayTeam(a, team)
}

func (s *Server) listTeams(w http.ResponseWriter, r *http.Request, a actor) error {
	teams, err := s.store.Read().Teams(r.Context())
	if err != nil {
		return err
	}
	if !a.admin() {
		own := []rulesapi.Team{}
		for _, t := range teams {
			if t.Name == a.team {
				own = append(own, t)
			}
		}
		teams = own
	}
	writeJSON(w, http.StatusOK, rulesapi.TeamList{Teams: teams})
	return nil
}

func (s *Server) createTeam(w http.ResponseWriter, r *http.Request, a actor) error {
	if err := mayAdmin(a); err != nil {
		return err
	}
	var req rulesapi.CreateTeamRequest
	if err := decode(w, r, &req); err != nil {
		return err
	}
	if err := ruledoc.CheckName("team", req.Name); err != nil {
		return errorf(http.StatusBadRequest, rulesapi.CodeBadRequest, "%v", err)
	}
	now := s.now()
	err := s.store.Change(r.Context(), func(tx *store.Tx) error {
		if err := tx.CreateTeam(r.Context(), req.Name, now); err != nil {
			return err
		}
		return tx.AddAudit(r.Context(), rulesapi.AuditEntry{At: now, Actor: a.String(), TokenID: a.tokenID, Action: rulesapi.ActionTeamCreate, Team: req.Name, After: "team " + req.Name})
	})
	if err != nil {
		return err
	}
	s.m.changes.WithLabelValues(rulesapi.ActionTeamCreate).Inc()
	t, err := s.store.Read().Team(r.Context(), req.Name)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, t)
	return nil
}

func (s *Server) getTeam(w http.ResponseWriter, r *http.Request, a actor) error {
	team, err := teamOf(r, a)
	if err != nil {
		return err
	}
	t, err := s.store.Read().Team(r.Context(), team)
	if err != nil {
		return err
	}
	w.Header().Set("ETag", rulesapi.VersionETag(t.Version))
	writeJSON(w, http.StatusOK, t)
	return nil
}

func (s *Server) deleteTeam(w http.ResponseWriter, r *http.Request, a actor) error {
	if err := mayAdmin(a); err != nil {
		return err
	}
	team, err := pathName(r, "team")
	if err != nil {
		return err
	}
	opts, err := readChangeOpts(r)
	if err != nil {
		return err
	}
	res, err := s.apply(r.Context(), a, teamChange{
		team: team, action: rulesapi.ActionTeamDelete, opts: opts, alwaysAfter: true,
		precondition: teamPrecondition(r),
		want: func(context.Context, *store.Tx, map[string]rulesapi.Rule) (desired, error) {
			return desired{specs: map[string]string{}, parsed: map[string]*config.Rule{}}, nil
		},
		after: func(ctx context.Context, tx *store.Tx, version int64, changed bool) error {
			if err := tx.DeleteTeam(ctx, team); err != nil {
				return err
			}
			if changed {
				return nil // audited with the team's rules before and after
			}
			return tx.AddAudit(ctx, rulesapi.AuditEntry{At: s.now(), Actor: a.String(), TokenID: a.tokenID, Action: rulesapi.ActionTeamDelete, Team: team, Version: version, Before: "team " + team})
		},
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}

func (s *Server) createToken(w http.ResponseWriter, r *http.Request, a actor) error {
	if err := mayAdmin(a); err != nil {
		return err
	}
	team, err := pathName(r, "team")
	if err != nil {
		return err
	}
	var req rulesapi.CreateTokenRequest
	if err := decode(w, r, &req); err != nil {
		return err
	}
	if len(req.Name) > rulesapi.MaxNameLen {
		return errorf(http.StatusBadRequest, rulesapi.CodeBadRequest, "token name longer than %d bytes", rulesapi.MaxNameLen)
	}
	id, secret := newToken()
	tok := rulesapi.Token{ID: id, Team: team, Name: req.Name, CreatedAt: s.now()}
	err = s.store.Change(r.Context(), func(tx *store.Tx) error {
		if _, err := tx.Team(r.Context(), team); err != nil {
			return err
		}
		if err := tx.CreateToken(r.Context(), store.TokenRecord{Token: tok, Hash: HashToken(secret)}); err != nil {
			return err
		}
		return tx.AddAudit(r.Context(), rulesapi.AuditEntry{At: tok.CreatedAt, Actor: a.String(), TokenID: a.tokenID, Action: rulesapi.ActionTokenCreate, Team: team, After: fmt.Sprintf("token %s (%s)", id, req.Name)})
	})
	if err != nil {
		return err
	}
	s.m.changes.WithLabelValues(rulesapi.ActionTokenCreate).Inc()
	tok.Secret = secret
	writeJSON(w, http.StatusCreated, tok)
	return nil
}

func (s *Server) listTokens(w http.ResponseWriter, r *http.Request, a actor) error {
	team, err := teamOf(r, a)
	if err != nil {
		return err
	}
	if _, err := s.store.Read().Team(r.Context(), team); err != nil {
		return err
	}
	recs, err := s.store.Read().Tokens(r.Context(), team)
	if err != nil {
		return err
	}
	toks := make([]rulesapi.Token, len(recs))
	for i, t := range recs {
		toks[i] = t.Token
	}
	writeJSON(w, http.StatusOK, rulesapi.TokenList{Tokens: toks})
	return nil
}

func (s *Server) revokeToken(w http.ResponseWriter, r *http.Request, a actor) error {
	if err := mayAdmin(a); err != nil {
		return err
	}
	team, err := pathName(r, "team")
	if err != nil {
		return err
	}
	id := r.PathValue("id")
	now := s.now()
	err = s.store.Change(r.Context(), func(tx *store.Tx) error {
		if err := tx.RevokeToken(r.Context(), team, id, now); err != nil {
			return err
		}
		return tx.AddAudit(r.Context(), rulesapi.AuditEntry{At: now, Actor: a.String(), TokenID: a.tokenID, Action: rulesapi.ActionTokenRevoke, Team: team, Before: "token " + id})
	})
	if err != nil {
		return err
	}
	s.m.changes.WithLabelValues(rulesapi.ActionTokenRevoke).Inc()
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) getTeamRules(w http.ResponseWriter, r *http.Request, a actor) error {
	team, err := teamOf(r, a)
	if err != nil {
		return err
	}
	t, err := s.store.Read().Team(r.Context(), team)
	if err != nil {
		return err
	}
	rules, err := s.store.Read().TeamRules(r.Context(), team)
	if err != nil {
		return err
	}
	w.Header().Set("ETag", rulesapi.VersionETag(t.Version))
	writeJSON(w, http.StatusOK, rulesapi.TeamRules{Team: team, Version: t.Version, Rules: rules, Document: ruledoc.TeamDocument(rules)})
	return nil
}

// teamPrecondition checks If-Match against the team's rules' ETag.
func teamPrecondition(r *http.Request) func(rulesapi.Team, map[string]rulesapi.Rule) error {
	im := r.Header.Get("If-Match")
	if im == "" {
		return nil
	}
	return func(t rulesapi.Team, _ map[string]rulesapi.Rule) error {
		etag := rulesapi.VersionETag(t.Version)
		if !rulesapi.ETagMatches(im, etag, true) {
			return stale(etag, "team "+t.Name+"'s rules")
		}
		return nil
	}
}

func stale(current, what string) error {
	e := errorf(http.StatusPreconditionFailed, rulesapi.CodeStale, "%s changed since you read them (now %s): get them again and retry", what, current)
	e.detail.Current = current
	return e
}

func (s *Server) putTeamRules(w http.ResponseWriter, r *http.Request, a actor) error {
	team, err := teamOf(r, a)
	if err != nil {
		return err
	}
	opts, err := readChangeOpts(r)
	if err != nil {
		return err
	}
	var req rulesapi.PutTeamRulesRequest
	if err := decode(w, r, &req); err != nil {
		return err
	}
	ents, parsed, err := ruledoc.ParseTeamDocument(team, req.Document)
	if err != nil {
		return err
	}
	specs := map[string]string{}
	for _, e := range ents {
		specs[e.Name] = e.Spec
	}
	res, err := s.apply(r.Context(), a, teamChange{
		team: team, action: rulesapi.ActionReplace, opts: opts, precondition: teamPrecondition(r),
		want: func(context.Context, *store.Tx, map[string]rulesapi.Rule) (desired, error) {
			return desired{specs: specs, parsed: parsed}, nil
		},
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}

func (s *Server) getRule(w http.ResponseWriter, r *http.Request, a actor) error {
	team, err := teamOf(r, a)
	if err != nil {
		return err
	}
	name, err := pathName(r, "rule")
	if err != nil {
		return err
	}
	rule, err := s.store.Read().Rule(r.Context(), team, name)
	if err != nil {
		return err
	}
	w.Header().Set("ETag", rulesapi.VersionETag(rule.Version))
	writeJSON(w, http.StatusOK, rule)
	return nil
}

// rulePrecondition checks If-Match and If-None-Match against one rule.
func rulePrecondition(r *http.Request, name string) func(rulesapi.Team, map[string]rulesapi.Rule) error {
	im, inm := r.Header.Get("If-Match"), r.Header.Get("If-None-Match")
	if im == "" && inm == "" {
		return nil
	}
	return func(_ rulesapi.Team, rules map[string]rulesapi.Rule) error {
		cur, exists := rules[name]
		etag := ""
		if exists {
			etag = rulesapi.VersionETag(cur.Version)
		}
		if im != "" && !rulesapi.ETagMatches(im, etag, exists) {
			if !exists {
				return errorf(http.StatusPreconditionFailed, rulesapi.CodeStale, "rule %s does not exist (any more): If-Match cannot match", name)
			}
			return stale(etag, "rule "+name)
		}
		if inm != "" && rulesapi.ETagMatches(inm, etag, exists) {
			return errorf(http.StatusConflict, rulesapi.CodeExists, "rule %s exists already (If-None-Match)", name)
		}
		return nil
	}
}

// otherRules are a team's rules but one, parsed, for a one-rule change.
func otherRules(rules map[string]rulesapi.Rule, except string) (map[string]string, map[string]*config.Rule, error) {
	specs := map[string]string{}
	var list []rulesapi.Rule
	for n, r := range rules {
		if n != except {
			specs[n] = r.Spec
			list = append(list, r)
		}
	}
	parsed, err := ruledoc.ParseTeamRules(list)
	return specs, parsed, err
}

func (s *Server) putRule(w http.ResponseWriter, r *http.Request, a actor) error {
	team, err := teamOf(r, a)
	if err != nil {
		return err
	}
	name, err := pathName(r, "rule")
	if err != nil {
		return err
	}
	opts, err := readChangeOpts(r)
	if err != nil {
		return err
	}
	var req rulesapi.PutRuleRequest
	if err := decode(w, r, &req); err != nil {
		return err
	}
	spec := ruledoc.NormalizeSpec(req.Spec)
	parsedRule, err := ruledoc.ParseSpec(team, name, spec)
	if err != nil {
		return err
	}
	created := false
	res, err := s.apply(r.Context(), a, teamChange{
		team: team, action: rulesapi.ActionUpdate, rule: name, opts: opts, precondition: rulePrecondition(r, name),
		want: func(_ context.Context, _ *store.Tx, rules map[string]rulesapi.Rule) (desired, error) {
			specs, parsed, err := otherRules(rules, name)
			if err != nil {
				return desired{}, err
			}
			_, exists := rules[name]
			created = !exists
			specs[name], parsed[name] = spec, parsedRule
			return desired{specs: specs, parsed: parsed, textMatters: true}, nil
		},
	})
	if err != nil {
		return err
	}
	status := http.StatusOK
	if created && res.Changed && !res.DryRun {
		status = http.StatusCreated
	}
	writeJSON(w, status, res)
	return nil
}

func (s *Server) deleteRule(w http.ResponseWriter, r *http.Request, a actor) error {
	team, err := teamOf(r, a)
	if err != nil {
		return err
	}
	name, err := pathName(r, "rule")
	if err != nil {
		return err
	}
	opts, err := readChangeOpts(r)
	if err != nil {
		return err
	}
	res, err := s.apply(r.Context(), a, teamChange{
		team: team, action: rulesapi.ActionDelete, rule: name, opts: opts, precondition: rulePrecondition(r, name),
		want: func(_ context.Context, _ *store.Tx, rules map[string]rulesapi.Rule) (desired, error) {
			if _, ok := rules[name]; !ok {
				return desired{}, fmt.Errorf("rule %s.%s: %w", team, name, store.ErrNotFound)
			}
			specs, parsed, err := otherRules(rules, name)
			return desired{specs: specs, parsed: parsed}, err
		},
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}

// intQuery reads a non-negative integer query parameter (absent: def).
func intQuery(r *http.Request, name string, def int64) (int64, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, errorf(http.StatusBadRequest, rulesapi.CodeBadRequest, "%s=%q: want a whole number >= 0", name, v)
	}
	return n, nil
}

// maxPage bounds a page of history or audit entries.
const maxPage = 1000

func (s *Server) history(w http.ResponseWriter, r *http.Request, a actor) error {
	team, err := teamOf(r, a)
	if err != nil {
		return err
	}
	limit, err := intQuery(r, "limit", 50)
	if err != nil {
		return err
	}
	if limit == 0 || limit > maxPage {
		limit = maxPage
	}
	if _, err := s.store.Read().Team(r.Context(), team); err != nil {
		return err
	}
	h, err := s.store.Read().History(r.Context(), team, int(limit))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, rulesapi.History{Team: team, Entries: h})
	return nil
}

func (s *Server) rollback(w http.ResponseWriter, r *http.Request, a actor) error {
	team, err := teamOf(r, a)
	if err != nil {
		return err
	}
	opts, err := readChangeOpts(r)
	if err != nil {
		return err
	}
	var req rulesapi.RollbackRequest
	if r.ContentLength != 0 {
		if err := decode(w, r, &req); err != nil {
			return err
		}
	}
	res, err := s.apply(r.Context(), a, teamChange{
		team: team, action: rulesapi.ActionRollback, opts: opts, precondition: teamPrecondition(r),
		want: func(ctx context.Context, tx *store.Tx, _ map[string]rulesapi.Rule) (desired, error) {
			target := req.ToVersion
			if target == 0 {
				latest, err := tx.History(ctx, team, 1)
				if err != nil {
					return desired{}, err
				}
				if len(latest) == 0 {
					return desired{}, errorf(http.StatusNotFound, rulesapi.CodeNotFound, "team %s has no history to roll back", team)
				}
				target = latest[0].Version - 1
			}
			doc := "rules: {}\n"
			h, err := tx.HistoryAt(ctx, team, target)
			switch {
			case err == nil:
				doc = h.Document
			case !errors.Is(err, store.ErrNotFound):
				return desired{}, err
			}
			ents, parsed, err := ruledoc.ParseTeamDocument(team, doc)
			if err != nil {
				return desired{}, fmt.Errorf("roll back to version %d: %w", target, err)
			}
			specs := map[string]string{}
			for _, e := range ents {
				specs[e.Name] = e.Spec
			}
			return desired{specs: specs, parsed: parsed}, nil
		},
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}

func (s *Server) audit(w http.ResponseWriter, r *http.Request, a actor) error {
	team := r.URL.Query().Get("team")
	if !a.admin() {
		team = a.team // a team reads only its own entries
	}
	limit, err := intQuery(r, "limit", 100)
	if err != nil {
		return err
	}
	if limit == 0 || limit > maxPage {
		limit = maxPage
	}
	before, err := intQuery(r, "before", 0)
	if err != nil {
		return err
	}
	entries, err := s.store.Read().Audit(r.Context(), team, before, int(limit))
	if err != nil {
		return err
	}
	l := rulesapi.AuditLog{Entries: entries}
	if len(entries) == int(limit) {
		l.NextBefore = entries[len(entries)-1].ID
	}
	writeJSON(w, http.StatusOK, l)
	return nil
}

// backup streams a consistent copy of a SQLite database (admin only).
func (s *Server) backup(w http.ResponseWriter, r *http.Request, a actor) error {
	if err := mayAdmin(a); err != nil {
		return err
	}
	if s.store.Dialect() != "sqlite" {
		return errorf(http.StatusBadRequest, rulesapi.CodeBadRequest, "the service backs up SQLite only: back PostgreSQL up with pg_dump")
	}
	dir, err := os.MkdirTemp("", "sluice-rules-backup-")
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "rules.db")
	if err := s.store.Backup(r.Context(), path); err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/vnd.sqlite3")
	w.Header().Set("Content-Disposition", `attachment; filename="sluice-rules-backup.db"`)
	http.ServeFile(w, r, path)
	return nil
}

package server

import (
	"context"
	"fmt"
	"net/http"

	"github.com/sluicelabs/sluice/cmd/sluice-rules/internal/ruledoc"
	"github.com/sluicelabs/sluice/cmd/sluice-rules/internal/store"
	"github.com/sluicelabs/sluice/config"
	"github.com/sluicelabs/sluice/internal/rulesapi"
)

func (s *Server) getTeamRules(w http.ResponseWriter, r *http.Request, a actor) error {
	t, err := s.pathTeam(r, a)
	if err != nil {
		return err
	}
	team := t.Name
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
	team, opts, err := teamChangeOf(r, a)
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
	team, name, err := ruleOf(r, a)
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

// ruleOf reads the path's team and rule names and checks the actor may
// touch the team.
func ruleOf(r *http.Request, a actor) (team, name string, err error) {
	if team, err = teamOf(r, a); err != nil {
		return "", "", err
	}
	if name, err = pathName(r, "rule"); err != nil {
		return "", "", err
	}
	return team, name, nil
}

// ruleChangeOf is ruleOf and the change options, for a request that
// changes one rule.
func ruleChangeOf(r *http.Request, a actor) (team, name string, opts changeOpts, err error) {
	if team, name, err = ruleOf(r, a); err != nil {
		return "", "", changeOpts{}, err
	}
	if opts, err = readChangeOpts(r); err != nil {
		return "", "", changeOpts{}, err
	}
	return team, name, opts, nil
}

// teamChangeOf reads the path's team, checks the actor may change it, and
// reads the change's options.
func teamChangeOf(r *http.Request, a actor) (team string, opts changeOpts, err error) {
	if team, err = teamOf(r, a); err != nil {
		return "", changeOpts{}, err
	}
	if opts, err = readChangeOpts(r); err != nil {
		return "", changeOpts{}, err
	}
	return team, opts, nil
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
	team, name, opts, err := ruleChangeOf(r, a)
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
	team, name, opts, err := ruleChangeOf(r, a)
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

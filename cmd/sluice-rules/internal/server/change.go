package server

import (
	"cmp"
	"context"
	"errors"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/sluicelabs/sluice/cmd/sluice-rules/internal/ruledoc"
	"github.com/sluicelabs/sluice/cmd/sluice-rules/internal/store"
	"github.com/sluicelabs/sluice/config"
	"github.com/sluicelabs/sluice/internal/rulesapi"
)

// changeOpts are a change request's flags.
type changeOpts struct {
	confirm bool
	dryRun  bool
}

func readChangeOpts(r *http.Request) (changeOpts, error) {
	c, err := boolQuery(r, "confirm")
	if err != nil {
		return changeOpts{}, err
	}
	d, err := boolQuery(r, "dry_run")
	return changeOpts{confirm: c, dryRun: d}, err
}

// desired is what a change wants a team's rules to be.
type desired struct {
	// specs by rule name: the team's complete rules after the change.
	specs map[string]string
	// parsed holds them parsed.
	parsed map[string]*config.Rule
	// textMatters: a spec whose text changed is a change even if its
	// meaning did not (a rule's PUT); otherwise only meaning counts and
	// unchanged rules keep their stored text (a push or rollback).
	textMatters bool
}

// teamChange describes one change of a team's rules.
type teamChange struct {
	team   string
	action string // rulesapi.Action*
	rule   string // for one-rule actions
	opts   changeOpts
	// precondition checks If-Match (etc.) against the team's rules as
	// stored; nil: none.
	precondition func(team rulesapi.Team, rules map[string]rulesapi.Rule) error
	// want computes the team's rules after the change from them.
	want func(ctx context.Context, tx *store.Tx, rules map[string]rulesapi.Rule) (desired, error)
	// after runs in the transaction after the rules are written (deleting
	// a team); nil: nothing.
	after func(ctx context.Context, tx *store.Tx, version int64, changed bool) error
	// alwaysAfter runs after (and records the action) even when the
	// team's rules do not change (deleting a team without rules).
	alwaysAfter bool
}

// errDryRun rolls a dry run's transaction back.
var errDryRun = errors.New("dry run")

// apply runs a change of a team's rules: see the package doc.
func (s *Server) apply(ctx context.Context, a actor, tc teamChange) (rulesapi.ChangeResult, error) {
	var res rulesapi.ChangeResult
	var published *store.Served
	action := tc.action
	err := s.store.Change(ctx, func(tx *store.Tx) error {
		team, err := tx.Team(ctx, tc.team)
		if err != nil {
			return err
		}
		list, err := tx.TeamRules(ctx, tc.team)
		if err != nil {
			return err
		}
		cur := make(map[string]rulesapi.Rule, len(list))
		for _, r := range list {
			cur[r.Name] = r
		}
		if tc.precondition != nil {
			if err := tc.precondition(team, cur); err != nil {
				s.m.staleRefusals.Inc()
				return err
			}
		}
		want, err := tc.want(ctx, tx, cur)
		if err != nil {
			return err
		}
		if len(want.specs) > rulesapi.MaxRulesPerTeam {
			return errorf(http.StatusRequestEntityTooLarge, rulesapi.CodeTooLarge, "%d rules; a team holds at most %d", len(want.specs), rulesapi.MaxRulesPerTeam)
		}
		curParsed, err := ruledoc.ParseTeamRules(list)
		if err != nil {
			return err
		}
		version, err := tx.ServedVersion(ctx)
		if err != nil {
			return err
		}
		res = rulesapi.ChangeResult{Version: version, ETag: rulesapi.VersionETag(team.Version), DryRun: tc.opts.dryRun}
		changes, final := diffTeam(cur, curParsed, want)
		res.Changes, res.Changed = changes, len(changes) > 0
		res.Loosenings = ruledoc.Loosenings(curParsed, want.parsed, s.factor)
		if !res.Changed && !tc.alwaysAfter {
			res.Loosenings = nil
			return errDryRun // nothing to write
		}
		if len(res.Loosenings) > 0 && !tc.opts.confirm && !tc.opts.dryRun {
			s.m.confirmRefusals.Inc()
			e := errorf(http.StatusConflict, rulesapi.CodeConfirmRequired, "this change removes or loosens limits by more than %gx: resend with confirm=true (CLI --confirm) if you mean it", s.factor)
			e.detail.Loosenings = res.Loosenings
			return e
		}
		doc, err := servedWith(ctx, tx, tc.team, final)
		if err != nil {
			return err
		}
		if tc.opts.dryRun {
			return errDryRun
		}
		if tc.rule != "" && len(res.Changes) == 1 {
			action = res.Changes[0].Action // a PUT that created the rule
		}
		newVersion := version
		if res.Changed {
			newVersion = version + 1
			sv, err := s.write(ctx, tx, a, tc, action, newVersion, list, final, res.Changes, doc)
			if err != nil {
				return err
			}
			published = &sv
			res.Version, res.ETag = newVersion, rulesapi.VersionETag(newVersion)
		}
		if tc.after != nil {
			return tc.after(ctx, tx, newVersion, res.Changed)
		}
		return nil
	})
	if errors.Is(err, errDryRun) {
		err = nil
	}
	if err != nil {
		return rulesapi.ChangeResult{}, err
	}
	if published != nil || (tc.alwaysAfter && !tc.opts.dryRun) {
		s.m.changes.WithLabelValues(action).Inc()
	}
	if published != nil {
		s.publish(*published)
		s.log.Info("rules changed", "version", published.Version, "team", tc.team, "action", action, "rule", tc.rule, "actor", a.String(), "token", a.tokenID)
	}
	return res, nil
}

// diffTeam compares a team's stored rules with the wanted ones: the
// changes, by rule name, and the team's specs after the change as they
// will be stored (a rule whose meaning, and, where text matters, text did
// not change keeps its stored text).
func diffTeam(cur map[string]rulesapi.Rule, curParsed map[string]*config.Rule, want desired) ([]rulesapi.Change, map[string]string) {
	names := map[string]bool{}
	for n := range cur {
		names[n] = true
	}
	for n := range want.specs {
		names[n] = true
	}
	changes := []rulesapi.Change{}
	final := map[string]string{}
	for _, n := range slices.Sorted(maps.Keys(names)) {
		old, had := cur[n]
		spec, has := want.specs[n]
		switch {
		case had && !has:
			changes = append(changes, rulesapi.Change{Rule: n, Action: rulesapi.ActionDelete, Before: old.Spec, Diff: ruledoc.Diff(n, old.Spec, "")})
		case !had && has:
			final[n] = spec
			changes = append(changes, rulesapi.Change{Rule: n, Action: rulesapi.ActionCreate, After: spec, Diff: ruledoc.Diff(n, "", spec)})
		case ruledoc.SameMeaning(curParsed[n], want.parsed[n]) && (!want.textMatters || old.Spec == spec):
			final[n] = old.Spec
		default:
			final[n] = spec
			changes = append(changes, rulesapi.Change{Rule: n, Action: rulesapi.ActionUpdate, Before: old.Spec, After: spec, Diff: ruledoc.Diff(n, old.Spec, spec)})
		}
	}
	return changes, final
}

// servedWith composes and validates the served document with team's rules
// replaced by final, before anything is written.
func servedWith(ctx context.Context, tx *store.Tx, team string, final map[string]string) (string, error) {
	all, err := tx.AllRules(ctx)
	if err != nil {
		return "", err
	}
	next := make([]rulesapi.Rule, 0, len(all)+len(final))
	for _, r := range all {
		if r.Team != team {
			next = append(next, r)
		}
	}
	for n, spec := range final {
		next = append(next, rulesapi.Rule{Team: team, Name: n, Spec: spec})
	}
	slices.SortFunc(next, func(a, b rulesapi.Rule) int {
		return cmp.Or(strings.Compare(a.Team, b.Team), strings.Compare(a.Name, b.Name))
	})
	doc, _, err := ruledoc.ServedDocument(next)
	if err != nil {
		if errors.Is(err, config.ErrRulesTooLarge) {
			return "", err
		}
		return "", &ruledoc.InvalidError{Problems: []rulesapi.FieldProblem{{Message: "the served document would be invalid: " + err.Error()}}}
	}
	return doc, nil
}

// write stores a change as version: the team's rules, its version, the
// served document, the team's history and the audit log.
func (s *Server) write(ctx context.Context, tx *store.Tx, a actor, tc teamChange, action string, version int64,
	before []rulesapi.Rule, final map[string]string, changes []rulesapi.Change, doc string) (store.Served, error) {
	now := s.now()
	for _, c := range changes {
		var err error
		if c.Action == rulesapi.ActionDelete {
			err = tx.DeleteRule(ctx, tc.team, c.Rule)
		} else {
			err = tx.PutRule(ctx, rulesapi.Rule{Team: tc.team, Name: c.Rule, Spec: final[c.Rule], Version: version, UpdatedAt: now})
		}
		if err != nil {
			return store.Served{}, err
		}
	}
	if err := tx.SetTeamVersion(ctx, tc.team, version); err != nil {
		return store.Served{}, err
	}
	sv := store.Served{Version: version, Document: doc, UpdatedAt: now}
	if err := tx.SetServed(ctx, sv); err != nil {
		return store.Served{}, err
	}
	h := rulesapi.HistoryEntry{Version: version, At: now, Actor: a.String(), TokenID: a.tokenID, Action: action, Rule: tc.rule, Document: ruledoc.Compose(entries(final))}
	if err := tx.AddHistory(ctx, tc.team, h); err != nil {
		return store.Served{}, err
	}
	if err := s.auditChange(ctx, tx, a, tc, version, now, before, final, changes); err != nil {
		return store.Served{}, err
	}
	return sv, nil
}

func entries(specs map[string]string) []ruledoc.Entry {
	out := make([]ruledoc.Entry, 0, len(specs))
	for _, n := range slices.Sorted(maps.Keys(specs)) {
		out = append(out, ruledoc.Entry{Name: n, Spec: specs[n]})
	}
	return out
}

// auditChange records a change: per rule with the rules' specs for a
// one-rule action, else once with the team's documents before and after.
func (s *Server) auditChange(ctx context.Context, tx *store.Tx, a actor, tc teamChange, version int64, now time.Time, before []rulesapi.Rule, after map[string]string, changes []rulesapi.Change) error {
	switch tc.action {
	case rulesapi.ActionCreate, rulesapi.ActionUpdate, rulesapi.ActionDelete:
		for _, c := range changes {
			if err := tx.AddAudit(ctx, rulesapi.AuditEntry{At: now, Actor: a.String(), TokenID: a.tokenID, Action: c.Action, Team: tc.team, Rule: c.Rule, Version: version, Before: c.Before, After: c.After}); err != nil {
				return err
			}
		}
		return nil
	}
	return tx.AddAudit(ctx, rulesapi.AuditEntry{At: now, Actor: a.String(), TokenID: a.tokenID, Action: tc.action, Team: tc.team, Version: version,
		Before: ruledoc.TeamDocument(before), After: ruledoc.Compose(entries(after))})
}

package server

import (
	"context"
	"net/http"

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

// pathTeam reads the path's team, checks the actor may touch it, and
// reads it from the store.
func (s *Server) pathTeam(r *http.Request, a actor) (rulesapi.Team, error) {
	team, err := teamOf(r, a)
	if err != nil {
		return rulesapi.Team{}, err
	}
	return s.store.Read().Team(r.Context(), team)
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
	t, err := s.pathTeam(r, a)
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

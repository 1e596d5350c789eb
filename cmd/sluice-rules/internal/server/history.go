package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/sluicelabs/sluice/cmd/sluice-rules/internal/ruledoc"
	"github.com/sluicelabs/sluice/cmd/sluice-rules/internal/store"
	"github.com/sluicelabs/sluice/internal/rulesapi"
)

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
	team, opts, err := teamChangeOf(r, a)
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

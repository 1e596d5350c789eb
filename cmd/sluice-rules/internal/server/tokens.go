package server

import (
	"fmt"
	"net/http"

	"github.com/sluicelabs/sluice/cmd/sluice-rules/internal/store"
	"github.com/sluicelabs/sluice/internal/rulesapi"
)

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

package server

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/sluicelabs/sluice/cmd/sluice-rules/internal/store"
	"github.com/sluicelabs/sluice/internal/rulesapi"
)

// tokenPrefix starts every token, so a leaked one is recognizable.
const tokenPrefix = "slr_"

// actor is who a request's token is.
type actor struct {
	team    string // empty for admin
	tokenID string
}

func (a actor) admin() bool { return a.team == "" }

// String is the actor as the audit log and history record it.
func (a actor) String() string {
	if a.admin() {
		return rulesapi.ActorAdmin
	}
	return rulesapi.ActorTeam + ":" + a.team
}

// HashToken is the hex SHA-256 the store keeps of a token.
func HashToken(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// newToken returns a new token's id and secret: 256 random bits.
func newToken() (id, secret string) {
	idb := make([]byte, 6)
	rand.Read(idb)
	sb := make([]byte, 32)
	rand.Read(sb)
	return hex.EncodeToString(idb), tokenPrefix + base64.RawURLEncoding.EncodeToString(sb)
}

// authenticate finds the request's bearer token.
func (s *Server) authenticate(r *http.Request) (actor, error) {
	h := r.Header.Get("Authorization")
	scheme, secret, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(secret) == "" {
		return actor{}, errorf(http.StatusUnauthorized, rulesapi.CodeUnauthorized, "send Authorization: Bearer <token>")
	}
	if len(secret) > 256 {
		return actor{}, errorf(http.StatusUnauthorized, rulesapi.CodeUnauthorized, "unknown or revoked token")
	}
	tok, err := s.store.Read().TokenByHash(r.Context(), HashToken(strings.TrimSpace(secret)))
	if errors.Is(err, store.ErrNotFound) {
		return actor{}, errorf(http.StatusUnauthorized, rulesapi.CodeUnauthorized, "unknown or revoked token")
	}
	if err != nil {
		return actor{}, fmt.Errorf("authenticate: %w", err)
	}
	return actor{team: tok.Team, tokenID: tok.ID}, nil
}

// mayTeam refuses an actor that is neither admin nor of team.
func mayTeam(a actor, team string) error {
	if a.admin() || a.team == team {
		return nil
	}
	return errorf(http.StatusForbidden, rulesapi.CodeForbidden, "this token is team %s's; it cannot touch team %s", a.team, team)
}

func mayAdmin(a actor) error {
	if a.admin() {
		return nil
	}
	return errorf(http.StatusForbidden, rulesapi.CodeForbidden, "only an admin token may do this")
}

// BootstrapAdmin makes sure the store holds an admin token. With secret
// set (from --admin-token-file) that token is added if missing and
// "" is returned. Without, a token is created only if there is no live
// admin token, and its secret returned (the only copy) for the caller to
// hand to the operator; "" if one exists.
func BootstrapAdmin(ctx context.Context, st *store.Store, secret string, now time.Time) (string, error) {
	var created string
	err := st.Change(ctx, func(tx *store.Tx) error {
		if secret != "" {
			if _, err := tx.TokenByHash(ctx, HashToken(secret)); err == nil {
				return nil
			}
			id, _ := newToken()
			return addAdmin(ctx, tx, id, "admin-token-file", secret, now)
		}
		toks, err := tx.Tokens(ctx, store.AdminTeam)
		if err != nil {
			return err
		}
		for _, t := range toks {
			if t.RevokedAt == nil {
				return nil
			}
		}
		id, sec := newToken()
		created = sec
		return addAdmin(ctx, tx, id, "generated", sec, now)
	})
	if err != nil {
		return "", fmt.Errorf("bootstrap the admin token: %w", err)
	}
	return created, nil
}

func addAdmin(ctx context.Context, tx *store.Tx, id, name, secret string, now time.Time) error {
	if err := tx.CreateToken(ctx, store.TokenRecord{Token: rulesapi.Token{ID: id, Team: store.AdminTeam, Name: name, CreatedAt: now}, Hash: HashToken(secret)}); err != nil {
		return err
	}
	return tx.AddAudit(ctx, rulesapi.AuditEntry{At: now, Actor: "service", TokenID: "", Action: rulesapi.ActionTokenCreate, After: "admin token " + id + " (" + name + ")"})
}

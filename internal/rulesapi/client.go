package rulesapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// maxAnswerBytes bounds an answer the client reads.
const maxAnswerBytes = 8 << 20

// Client calls the rules service's API with one bearer token. It is safe
// for concurrent use.
type Client struct {
	base  string
	token string
	// HTTP does the requests; http.DefaultClient-like with a 30 s timeout
	// unless replaced.
	HTTP *http.Client
}

// NewClient returns a client of the service at baseURL (e.g.
// "http://127.0.0.1:7380") authenticating with token.
func NewClient(baseURL, token string) *Client {
	return &Client{base: strings.TrimRight(baseURL, "/"), token: token, HTTP: &http.Client{Timeout: 30 * time.Second}}
}

// ChangeOptions are the conditions and flags of a change.
type ChangeOptions struct {
	// IfMatch, when set, is sent as If-Match: the change is refused with
	// 412 (CodeStale) unless the resource's ETag still matches.
	IfMatch string
	// IfNoneMatch, when set (to "*"), creates a rule only if it is new.
	IfNoneMatch string
	// Confirm allows a change that removes or loosens limits.
	Confirm bool
	// DryRun validates and reports the change without storing it.
	DryRun bool
}

func (o ChangeOptions) query() url.Values {
	q := url.Values{}
	if o.Confirm {
		q.Set("confirm", "true")
	}
	if o.DryRun {
		q.Set("dry_run", "true")
	}
	return q
}

func (o ChangeOptions) header() http.Header {
	h := http.Header{}
	if o.IfMatch != "" {
		h.Set("If-Match", o.IfMatch)
	}
	if o.IfNoneMatch != "" {
		h.Set("If-None-Match", o.IfNoneMatch)
	}
	return h
}

// call does one request: in (if not nil) as the JSON body, the answer
// decoded into out (if not nil). It returns the answer's ETag, and an
// *APIError for any status from 400 on.
func (c *Client) call(ctx context.Context, method, path string, q url.Values, h http.Header, in, out any) (string, error) {
	u := c.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return "", fmt.Errorf("%s %s: encode: %w", method, path, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return "", fmt.Errorf("%s %s: %w", method, path, err)
	}
	for k, v := range h {
		req.Header[k] = v
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return "", fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	if err != nil {
		return "", fmt.Errorf("%s %s: read answer: %w", method, path, err)
	}
	if resp.StatusCode >= 400 {
		apiErr := &APIError{Status: resp.StatusCode}
		var eb ErrorBody
		if json.Unmarshal(data, &eb) == nil && eb.Error.Code != "" {
			apiErr.ErrorDetail = eb.Error
		} else {
			apiErr.Code = http.StatusText(resp.StatusCode)
			apiErr.Message = strings.TrimSpace(string(data))
		}
		return "", apiErr
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return "", fmt.Errorf("%s %s: decode answer: %w", method, path, err)
		}
	}
	return resp.Header.Get("ETag"), nil
}

func teamPath(team string, rest ...string) string {
	p := APIPrefix + "/teams/" + url.PathEscape(team)
	for _, r := range rest {
		p += "/" + url.PathEscape(r)
	}
	return p
}

// WhoAmI says what the client's token is.
func (c *Client) WhoAmI(ctx context.Context) (WhoAmI, error) {
	var w WhoAmI
	_, err := c.call(ctx, http.MethodGet, APIPrefix+"/whoami", nil, nil, nil, &w)
	return w, err
}

// Status returns the served document's version.
func (c *Client) Status(ctx context.Context) (Status, error) {
	var s Status
	_, err := c.call(ctx, http.MethodGet, APIPrefix+"/status", nil, nil, nil, &s)
	return s, err
}

// ListTeams lists the teams (admin: all; a team token: its own).
func (c *Client) ListTeams(ctx context.Context) ([]Team, error) {
	var l TeamList
	_, err := c.call(ctx, http.MethodGet, APIPrefix+"/teams", nil, nil, nil, &l)
	return l.Teams, err
}

// CreateTeam creates a team (admin only).
func (c *Client) CreateTeam(ctx context.Context, name string) (Team, error) {
	var t Team
	_, err := c.call(ctx, http.MethodPost, APIPrefix+"/teams", nil, nil, CreateTeamRequest{Name: name}, &t)
	return t, err
}

// DeleteTeam deletes a team, its rules and its tokens (admin only); a team
// that has rules needs confirm.
func (c *Client) DeleteTeam(ctx context.Context, name string, confirm bool) (ChangeResult, error) {
	var r ChangeResult
	_, err := c.call(ctx, http.MethodDelete, teamPath(name), ChangeOptions{Confirm: confirm}.query(), nil, nil, &r)
	return r, err
}

// CreateToken issues a token for a team (admin only); the answer's Secret
// is the only copy.
func (c *Client) CreateToken(ctx context.Context, team, name string) (Token, error) {
	var t Token
	_, err := c.call(ctx, http.MethodPost, teamPath(team, "tokens"), nil, nil, CreateTokenRequest{Name: name}, &t)
	return t, err
}

// ListTokens lists a team's tokens, without secrets.
func (c *Client) ListTokens(ctx context.Context, team string) ([]Token, error) {
	var l TokenList
	_, err := c.call(ctx, http.MethodGet, teamPath(team, "tokens"), nil, nil, nil, &l)
	return l.Tokens, err
}

// RevokeToken revokes one of a team's tokens (admin only).
func (c *Client) RevokeToken(ctx context.Context, team, id string) error {
	_, err := c.call(ctx, http.MethodDelete, teamPath(team, "tokens", id), nil, nil, nil, nil)
	return err
}

// TeamRules returns a team's rules and their ETag (for IfMatch).
func (c *Client) TeamRules(ctx context.Context, team string) (TeamRules, string, error) {
	var r TeamRules
	etag, err := c.call(ctx, http.MethodGet, teamPath(team, "rules"), nil, nil, nil, &r)
	return r, etag, err
}

// PutTeamRules replaces all of a team's rules with a rules document (the
// team's own names under "rules:").
func (c *Client) PutTeamRules(ctx context.Context, team, document string, o ChangeOptions) (ChangeResult, error) {
	var r ChangeResult
	_, err := c.call(ctx, http.MethodPut, teamPath(team, "rules"), o.query(), o.header(), PutTeamRulesRequest{Document: document}, &r)
	return r, err
}

// Rule returns one rule and its ETag.
func (c *Client) Rule(ctx context.Context, team, rule string) (Rule, string, error) {
	var r Rule
	etag, err := c.call(ctx, http.MethodGet, teamPath(team, "rules", rule), nil, nil, nil, &r)
	return r, etag, err
}

// PutRule creates or replaces one rule; spec is its body in rules YAML.
func (c *Client) PutRule(ctx context.Context, team, rule, spec string, o ChangeOptions) (ChangeResult, error) {
	var r ChangeResult
	_, err := c.call(ctx, http.MethodPut, teamPath(team, "rules", rule), o.query(), o.header(), PutRuleRequest{Spec: spec}, &r)
	return r, err
}

// DeleteRule deletes one rule (removing limits: it needs o.Confirm).
func (c *Client) DeleteRule(ctx context.Context, team, rule string, o ChangeOptions) (ChangeResult, error) {
	var r ChangeResult
	_, err := c.call(ctx, http.MethodDelete, teamPath(team, "rules", rule), o.query(), o.header(), nil, &r)
	return r, err
}

// History returns up to limit versions of a team's rules, newest first
// (limit 0: the service's default).
func (c *Client) History(ctx context.Context, team string, limit int) (History, error) {
	var h History
	q := url.Values{}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	_, err := c.call(ctx, http.MethodGet, teamPath(team, "history"), q, nil, nil, &h)
	return h, err
}

// Rollback puts a team's rules back to what they were before its latest
// change (toVersion 0) or at global version toVersion.
func (c *Client) Rollback(ctx context.Context, team string, toVersion int64, o ChangeOptions) (ChangeResult, error) {
	var r ChangeResult
	_, err := c.call(ctx, http.MethodPost, teamPath(team, "rollback"), o.query(), o.header(), RollbackRequest{ToVersion: toVersion}, &r)
	return r, err
}

// AuditQuery selects audit entries.
type AuditQuery struct {
	Team   string // only this team's (a team token sees only its own anyway)
	Limit  int    // at most this many (0: the service's default)
	Before int64  // only entries with an ID below this (0: from the newest)
}

// Audit reads the audit log, newest first.
func (c *Client) Audit(ctx context.Context, aq AuditQuery) (AuditLog, error) {
	var l AuditLog
	q := url.Values{}
	if aq.Team != "" {
		q.Set("team", aq.Team)
	}
	if aq.Limit > 0 {
		q.Set("limit", strconv.Itoa(aq.Limit))
	}
	if aq.Before > 0 {
		q.Set("before", strconv.FormatInt(aq.Before, 10))
	}
	_, err := c.call(ctx, http.MethodGet, APIPrefix+"/audit", q, nil, nil, &l)
	return l, err
}

// ErrNotModified is what Served returns when the document's ETag is still
// the one given.
var ErrNotModified = errors.New("rules document not modified")

// Served fetches the served rules document as a daemon does: conditional
// on etag when not empty, held up to wait (whole seconds) for a newer
// version when wait > 0. It returns ErrNotModified on 304.
func (c *Client) Served(ctx context.Context, etag string, wait time.Duration) (doc []byte, newETag string, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+ServedPath, nil)
	if err != nil {
		return nil, "", fmt.Errorf("fetch served rules: %w", err)
	}
	if etag != "" {
		req.Header.Set("If-None-Match", etag)
	}
	if secs := int64(wait / time.Second); secs > 0 {
		req.Header.Set(HeaderPrefer, "wait="+strconv.FormatInt(secs, 10))
	}
	hc := *c.HTTP
	if hc.Timeout != 0 && wait > 0 {
		hc.Timeout += wait
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, "", fmt.Errorf("fetch served rules: %w", err)
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusNotModified:
		return nil, etag, ErrNotModified
	case http.StatusOK:
	default:
		return nil, "", fmt.Errorf("fetch served rules: %s", resp.Status)
	}
	doc, err = io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	if err != nil {
		return nil, "", fmt.Errorf("fetch served rules: read: %w", err)
	}
	return doc, resp.Header.Get("ETag"), nil
}

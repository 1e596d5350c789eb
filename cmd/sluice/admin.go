package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/sluicelabs/sluice/daemon/adminapi"
)

// defaultAdmin is where sluiced serves its admin endpoint unless told otherwise.
const defaultAdmin = "http://127.0.0.1:9464"

// maxAnswer bounds what the CLI reads of one admin answer; /v1/members of a
// large cluster is the biggest, well under this.
const maxAnswer = 16 << 20

// adminClient talks to a daemon's admin HTTP endpoint. Every request is bounded
// by the client's timeout and by its context.
type adminClient struct {
	base    string // scheme://host[:port][/prefix], no trailing slash
	timeout time.Duration
	hc      *http.Client
}

// newAdminClient accepts a URL ("http://127.0.0.1:9464", "https://h/prefix")
// or a bare "host:port", which means http.
func newAdminClient(addr string, timeout time.Duration) (*adminClient, error) {
	addr = strings.TrimSpace(addr)
	if addr == "" {
		return nil, errors.New("--admin is empty: give the daemon's admin address, e.g. 127.0.0.1:9464")
	}
	if timeout <= 0 {
		return nil, fmt.Errorf("--timeout %s must be positive", timeout)
	}
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	u, err := url.Parse(addr)
	if err != nil {
		return nil, fmt.Errorf("--admin %q: %w", addr, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("--admin %q: want http://HOST:PORT or HOST:PORT", addr)
	}
	base := u.Scheme + "://" + u.Host + strings.TrimSuffix(u.EscapedPath(), "/")
	return &adminClient{base: base, timeout: timeout, hc: &http.Client{Timeout: timeout}}, nil
}

// statusError is a non-2xx answer. Message is the daemon's "error" field when
// the body is JSON with one, else the start of the body.
type statusError struct {
	Code    int
	Message string
	JSON    bool   // the body was a JSON object with an "error" field
	Body    []byte // the whole body, for callers that read the JSON
	URL     string
}

func (e *statusError) Error() string {
	msg := e.Message
	if msg == "" {
		msg = http.StatusText(e.Code)
	}
	return fmt.Sprintf("%s answered %d: %s", e.URL, e.Code, msg)
}

// get fetches path and decodes its JSON into v; it returns the raw body too
// (for --json).
func (a *adminClient) get(ctx context.Context, path string, v any) ([]byte, error) {
	return a.call(ctx, http.MethodGet, path, v)
}

// post sends an empty POST to path and decodes the JSON answer into v.
func (a *adminClient) post(ctx context.Context, path string, v any) ([]byte, error) {
	return a.call(ctx, http.MethodPost, path, v)
}

func (a *adminClient) call(ctx context.Context, method, path string, v any) ([]byte, error) {
	target := a.base + path
	req, err := http.NewRequestWithContext(ctx, method, target, nil)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, target, err)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set(adminapi.Header, "1") // mutations need it (see adminapi.Header)
	resp, err := a.hc.Do(req)
	if err != nil {
		return nil, a.unreachable(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return nil, fmt.Errorf("reading the answer of %s: %w", target, a.unreachable(err))
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return body, newStatusError(target, resp.StatusCode, body)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return body, fmt.Errorf("%s did not answer as a sluiced admin endpoint does (%w); is --admin right?", target, err)
	}
	return body, nil
}

// unreachable words a transport error for an operator: which endpoint, and
// whether it refused or did not answer in time.
func (a *adminClient) unreachable(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		if ue.Timeout() {
			return fmt.Errorf("cannot reach the daemon's admin endpoint %s: no answer within %s (--timeout)", a.base, a.timeout)
		}
		err = ue.Err
	}
	return fmt.Errorf("cannot reach the daemon's admin endpoint %s (is sluiced running with --admin-addr there?): %w", a.base, err)
}

func newStatusError(target string, code int, body []byte) *statusError {
	e := &statusError{Code: code, Body: body, URL: target}
	var withError struct {
		Error *string `json:"error"`
	}
	if json.Unmarshal(body, &withError) == nil && withError.Error != nil {
		e.Message, e.JSON = *withError.Error, true
		return e
	}
	msg := strings.TrimSpace(string(body))
	if len(msg) > 200 {
		msg = msg[:200] + "..."
	}
	e.Message = msg
	return e
}

// printJSON writes a daemon answer compactly on one line.
func printJSON(w io.Writer, raw []byte) error {
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return fmt.Errorf("re-encoding the daemon's JSON: %w", err)
	}
	buf.WriteByte('\n')
	_, err := w.Write(buf.Bytes())
	return err
}

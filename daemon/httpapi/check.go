package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net/http"
	"time"

	"github.com/sluicelabs/sluice/bucket"
	"github.com/sluicelabs/sluice/clientlib"
	"github.com/sluicelabs/sluice/ipc"
)

// MaxDelayLimit is the longest max_delay a check may ask for.
const MaxDelayLimit = time.Hour

// CheckRequest is the body of POST /v1/check.
type CheckRequest struct {
	Checks []CheckJSON `json:"checks"`
}

// CheckJSON is one check of a CheckRequest: a rule, the client's key, the
// tokens the request takes (absent: 1) and, for shaping, the longest the
// caller will wait for its turn, in seconds (absent or 0: refuse at once).
type CheckJSON struct {
	Rule     string  `json:"rule"`
	Key      string  `json:"key"`
	Cost     *int64  `json:"cost,omitempty"`
	MaxDelay float64 `json:"max_delay,omitempty"`
}

// CheckResponse is the answer of POST /v1/check: whether the request is
// admitted, how long to wait first when a shaped check reserved a later
// turn (seconds), and one result per check, in the request's order. When
// the daemon could not decide, Allowed is true, FailedOpen says so, Error
// says why, and Results is empty.
type CheckResponse struct {
	Allowed    bool         `json:"allowed"`
	Delay      float64      `json:"delay"`
	Results    []ResultJSON `json:"results"`
	FailedOpen bool         `json:"failed_open,omitempty"`
	Error      string       `json:"error,omitempty"`
}

// ResultJSON is one check's outcome, as the socket's RESULT carries it:
// Status is ipc.Status's name (ok, over_limit, unknown_rule,
// unknown_rule_allowed, delayed, shadow_denied, soft), Allowed whether that
// status admits; Limit tokens per Period; Remaining tokens left; RetryAfter
// when a refused check could pass (or, delayed, when its turn comes);
// ResetAfter when the bucket is full again. Durations are in seconds.
type ResultJSON struct {
	Rule       string  `json:"rule"`
	Status     string  `json:"status"`
	Allowed    bool    `json:"allowed"`
	Limit      uint64  `json:"limit"`
	Remaining  uint64  `json:"remaining"`
	RetryAfter float64 `json:"retry_after"`
	ResetAfter float64 `json:"reset_after"`
	Period     float64 `json:"period"`
}

// ErrorJSON is the body of every refusal: what is wrong with the request.
type ErrorJSON struct {
	Error string `json:"error"`
}

// requestError is an invalid request: the status to answer and why.
type requestError struct {
	status int
	msg    string
}

func (e *requestError) Error() string { return e.msg }

func badRequest(format string, args ...any) *requestError {
	return &requestError{http.StatusBadRequest, fmt.Sprintf(format, args...)}
}

// serveCheck answers POST /v1/check.
func (s *Server) serveCheck(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		s.refuse(w, &requestError{http.StatusMethodNotAllowed, "/v1/check takes POST with a JSON body"})
		return
	}
	checks, err := s.readChecks(w, r)
	if err != nil {
		s.refuse(w, err)
		return
	}
	results := make([]ipc.Result, len(checks))
	allowed, derr := s.cfg.Decider.Decide(checks, results)
	if derr != nil {
		if e := (*ipc.Error)(nil); errors.As(derr, &e) && e.Code != ipc.CodeInternal {
			s.refuse(w, badRequest("invalid check: %s", e.Message))
			return
		}
		// The daemon could not decide: admit, counted and logged.
		s.counters.failedOpen.Add(1)
		s.cfg.FailOpen.Record(derr)
		writeJSON(w, http.StatusOK, CheckResponse{Allowed: true, Results: []ResultJSON{}, FailedOpen: true, Error: derr.Error()})
		return
	}
	resp := CheckResponse{Allowed: allowed, Results: make([]ResultJSON, len(results))}
	resp.Delay = clientlib.DecisionOf(allowed, results).Delay.Seconds()
	for i, res := range results {
		resp.Results[i] = ResultJSON{
			Rule: string(checks[i].Rule), Status: res.Status.String(), Allowed: res.Status.Admits(),
			Limit: res.Limit, Remaining: res.Remaining,
			RetryAfter: res.RetryAfter.Seconds(), ResetAfter: res.ResetAfter.Seconds(), Period: res.Period.Seconds(),
		}
	}
	if allowed {
		s.counters.checkAllowed.Add(1)
	} else {
		s.counters.checkDenied.Add(1)
	}
	writeJSON(w, http.StatusOK, resp)
}

// readChecks reads and validates a /v1/check body into the checks to
// decide. Keys longer than the store takes are bounded (clientlib.BoundedKey).
func (s *Server) readChecks(w http.ResponseWriter, r *http.Request) ([]ipc.Check, *requestError) {
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		return nil, &requestError{http.StatusUnsupportedMediaType, "/v1/check takes Content-Type: application/json"}
	}
	if r.ContentLength > int64(s.cfg.MaxBody) {
		return nil, &requestError{http.StatusRequestEntityTooLarge, fmt.Sprintf("body of %d bytes is over the cap of %d", r.ContentLength, s.cfg.MaxBody)}
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, int64(s.cfg.MaxBody)))
	dec.DisallowUnknownFields()
	var req CheckRequest
	if err := dec.Decode(&req); err != nil {
		if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
			return nil, &requestError{http.StatusRequestEntityTooLarge, fmt.Sprintf("body is over the cap of %d bytes", s.cfg.MaxBody)}
		}
		return nil, badRequest("invalid JSON body: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, badRequest("invalid JSON body: one object expected, more follows")
	}
	switch {
	case len(req.Checks) == 0:
		return nil, badRequest("no checks: want {\"checks\": [{\"rule\": ..., \"key\": ..., \"cost\": 1}]}")
	case len(req.Checks) > s.cfg.MaxBatch:
		return nil, badRequest("%d checks: at most %d per request", len(req.Checks), s.cfg.MaxBatch)
	}
	checks := make([]ipc.Check, len(req.Checks))
	for i, c := range req.Checks {
		cost := int64(1)
		if c.Cost != nil {
			cost = *c.Cost
		}
		switch {
		case c.Rule == "":
			return nil, badRequest("check %d: rule is missing", i)
		case c.Key == "":
			return nil, badRequest("check %d: key is missing", i)
		case cost < 1 || cost > bucket.MaxCost:
			return nil, badRequest("check %d: cost %d is not in [1, %d]", i, cost, int64(bucket.MaxCost))
		case c.MaxDelay < 0 || c.MaxDelay > MaxDelayLimit.Seconds() || math.IsNaN(c.MaxDelay):
			return nil, badRequest("check %d: max_delay %g is not in [0, %g] seconds", i, c.MaxDelay, MaxDelayLimit.Seconds())
		}
		key := clientlib.BoundedKey(c.Key, s.cfg.MaxKeyLen)
		checks[i] = ipc.Check{Rule: []byte(c.Rule), Key: []byte(key), Cost: uint64(cost),
			MaxDelay: time.Duration(c.MaxDelay * float64(time.Second))}
	}
	return checks, nil
}

// refuse answers an invalid request with its status and {"error": ...}.
func (s *Server) refuse(w http.ResponseWriter, e *requestError) {
	s.counters.invalid.Add(1)
	writeJSON(w, e.status, ErrorJSON{Error: e.msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

package rulesapi

import (
	"fmt"
	"strings"
)

// Error codes: ErrorBody.Error.Code, for callers to branch on.
const (
	CodeBadRequest      = "bad_request"      // 400: malformed JSON, bad name, bad query
	CodeInvalidRules    = "invalid_rules"    // 422: the daemon's parser refused the rules; see Problems
	CodeUnauthorized    = "unauthorized"     // 401: no token, or an unknown or revoked one
	CodeForbidden       = "forbidden"        // 403: another team's rules, or an admin endpoint
	CodeNotFound        = "not_found"        // 404: no such team, rule, token or version
	CodeExists          = "exists"           // 409: the team or rule exists already
	CodeConfirmRequired = "confirm_required" // 409: removes or loosens limits; resend with ?confirm=true
	CodeStale           = "stale"            // 412: If-Match did not match; get and retry
	CodeTooLarge        = "too_large"        // 413: body, or too many rules
	CodeUnavailable     = "unavailable"      // 503: the database did not answer
	CodeInternal        = "internal"         // 500
)

// FieldProblem is one problem the daemon's parser found in a rule.
type FieldProblem struct {
	// Rule is the team's rule name ("" for a problem outside any rule).
	Rule string `json:"rule,omitempty"`
	// Field is the dotted path within the rule, e.g. "burst",
	// "limits[1].rate", "overrides.alice.rate" ("" for the whole rule).
	Field string `json:"field,omitempty"`
	// Line and Column are in the document or spec that was sent.
	Line    int    `json:"line,omitempty"`
	Column  int    `json:"column,omitempty"`
	Message string `json:"message"`
}

func (p FieldProblem) String() string {
	var b strings.Builder
	if p.Rule != "" {
		b.WriteString("rule " + p.Rule)
		if p.Field != "" {
			b.WriteString(" field " + p.Field)
		}
		b.WriteString(": ")
	}
	if p.Line > 0 {
		fmt.Fprintf(&b, "line %d: ", p.Line)
	}
	b.WriteString(p.Message)
	return b.String()
}

// ErrorDetail is the content of every error answer.
type ErrorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// Problems lists what the parser refused, for CodeInvalidRules.
	Problems []FieldProblem `json:"problems,omitempty"`
	// Loosenings lists what needs ?confirm=true, for CodeConfirmRequired.
	Loosenings []Loosening `json:"loosenings,omitempty"`
	// Current is the current ETag, for CodeStale.
	Current string `json:"current_etag,omitempty"`
}

// ErrorBody is the JSON of every error answer: {"error": {...}}.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// APIError is an error answer as Client returns it.
type APIError struct {
	Status int // the HTTP status
	ErrorDetail
}

func (e *APIError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "rules service: %d %s: %s", e.Status, e.Code, e.Message)
	for _, p := range e.Problems {
		b.WriteString("\n  " + p.String())
	}
	for _, l := range e.Loosenings {
		b.WriteString("\n  " + l.Rule)
		if l.Key != "" {
			b.WriteString(" (key " + l.Key + ")")
		}
		b.WriteString(": " + l.Reason)
	}
	return b.String()
}

package httpapi

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// FuzzCheckBody feeds /v1/check arbitrary bodies: it never panics, answers
// only 200, 400 or 413, always in JSON, and a 200 answers every check of a
// request that is itself valid JSON of at most MaxBatch checks.
func FuzzCheckBody(f *testing.F) {
	for _, seed := range []string{
		`{"checks":[{"rule":"api","key":"k"}]}`,
		`{"checks":[{"rule":"api","key":"k","cost":2,"max_delay":0.5},{"rule":"other","key":"k"}]}`,
		`{"checks":[{"rule":"nope","key":"k"}]}`,
		`{"checks":[]}`, `{}`, `[]`, `null`, `{"checks":[{"rule":"api","key":"k","cost":-1}]}`,
		`{"checks":[{"rule":"api","key":"` + strings.Repeat("x", 300) + `"}]}`,
	} {
		f.Add(seed)
	}
	d := newDaemonRules(f, testRules)
	s := newServerTB(f, d)
	f.Fuzz(func(t *testing.T, body string) {
		w := post(s.Handler(), "application/json", body)
		switch w.Code {
		case http.StatusOK:
			var req CheckRequest
			var resp CheckResponse
			if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil {
				t.Fatalf("200 with a body that is not JSON: %q", w.Body)
			}
			if err := json.Unmarshal([]byte(body), &req); err != nil {
				t.Fatalf("200 for a body that is not valid JSON: %q", body)
			}
			if len(req.Checks) == 0 || len(req.Checks) > 4 || len(resp.Results) != len(req.Checks) {
				t.Fatalf("200 with %d results for %d checks: %q", len(resp.Results), len(req.Checks), body)
			}
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
			var e ErrorJSON
			if json.Unmarshal(w.Body.Bytes(), &e) != nil || e.Error == "" {
				t.Fatalf("%d without a JSON error: %q", w.Code, w.Body)
			}
		default:
			t.Fatalf("status %d for %q", w.Code, body)
		}
	})
}

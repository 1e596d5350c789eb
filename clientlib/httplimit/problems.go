package httplimit

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"

	"github.com/sluicelabs/sluice/clientlib"
)

// WriteMisconfigured answers 500 with a problem-details body: the limiter
// refused the request as invalid (a route costing more than its rule's
// burst, a rule the daemon does not know under unknown_rule: deny). That is
// the operator's error, not the client's and not a rate limit, so there is
// no Retry-After, and the request is neither served nor forwarded: a route
// the limiter cannot enforce is not served unlimited.
func WriteMisconfigured(w http.ResponseWriter, checks []clientlib.Check) {
	rules := ruleList(checks)
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusInternalServerError)
	json.NewEncoder(w).Encode(problem{
		Type: "about:blank", Title: "Rate limit misconfigured", Status: http.StatusInternalServerError,
		Detail: fmt.Sprintf("the rate limit of this route (rule %q) is misconfigured; the request was not served", rules),
		Rule:   rules,
	})
}

// WriteUnavailable answers 503 with Retry-After and a problem-details body:
// the limiter could not decide and fails closed. A daemon outage is not a
// rate limit, so it is not a 429, and the wait is never 0, which would
// invite a tight retry loop.
func WriteUnavailable(w http.ResponseWriter, retryAfter int64) {
	retryAfter = max(retryAfter, 1)
	w.Header().Set("Retry-After", strconv.FormatInt(retryAfter, 10))
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusServiceUnavailable)
	json.NewEncoder(w).Encode(problem{
		Type: "about:blank", Title: "Service Unavailable", Status: http.StatusServiceUnavailable,
		Detail:     fmt.Sprintf("the rate limiter is unavailable and this service fails closed; retry in %d s", retryAfter),
		RetryAfter: retryAfter,
	})
}

// unavailableRetry is the Retry-After of a fail-closed 503: 1 to 5 seconds,
// drawn at random so that the callers turned away together do not all come
// back in the same second.
func unavailableRetry() int64 { return 1 + rand.Int64N(5) }

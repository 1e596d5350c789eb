package httplimit

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sluicelabs/sluice/internal/backoff"
)

// Transport is an http.RoundTripper for callers of rate-limited APIs. On 429
// (or 503) it waits as the response's Retry-After or RateLimit header says;
// without such a header, and on network errors and 502/503/504, it backs
// off exponentially with full jitter. It retries only requests that are safe
// to repeat: idempotent methods, or requests carrying an Idempotency-Key,
// whose body can be replayed. Attempts, each wait and the total time are
// capped, and the request's context is honoured throughout.
type Transport struct {
	// Base sends the requests. Default http.DefaultTransport.
	Base http.RoundTripper
	// MaxAttempts bounds tries per request, the first included. Default 4.
	MaxAttempts int
	// BaseDelay and MaxDelay shape the backoff: attempt n waits a random
	// time in [0, min(MaxDelay, BaseDelay × 2^(n−1))). Defaults 100ms, 10s.
	BaseDelay, MaxDelay time.Duration
	// MaxWait is the longest a server may make us wait once; a longer
	// Retry-After is handed back to the caller instead. Default 30s.
	MaxWait time.Duration
	// MaxTotal bounds the time spent on one request across attempts. Default 60s.
	MaxTotal time.Duration

	// Now, Sleep and Rand are the clock and randomness; tests inject them.
	// Defaults: time.Now, a timer that stops on the context, math/rand/v2.
	Now   func() time.Time
	Sleep func(ctx context.Context, d time.Duration) error
	Rand  func() float64
}

func (t *Transport) defaults() Transport {
	c := *t
	if c.Base == nil {
		c.Base = http.DefaultTransport
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = 4
	}
	if c.BaseDelay <= 0 {
		c.BaseDelay = 100 * time.Millisecond
	}
	if c.MaxDelay <= 0 {
		c.MaxDelay = 10 * time.Second
	}
	if c.MaxWait <= 0 {
		c.MaxWait = 30 * time.Second
	}
	if c.MaxTotal <= 0 {
		c.MaxTotal = 60 * time.Second
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Sleep == nil {
		c.Sleep = waitCtx
	}
	if c.Rand == nil {
		c.Rand = rand.Float64
	}
	return c
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	c := t.defaults()
	start := c.Now()
	retryable := replayable(req)
	for attempt := 1; ; attempt++ {
		try := req
		if attempt > 1 && req.Body != nil && req.Body != http.NoBody {
			body, err := req.GetBody()
			if err != nil {
				return nil, err
			}
			try = req.Clone(req.Context())
			try.Body = body
		}
		resp, err := c.Base.RoundTrip(try)
		wait, again := c.nextWait(resp, err, attempt)
		if !again || !retryable || attempt >= c.MaxAttempts || c.Now().Add(wait).Sub(start) > c.MaxTotal {
			return resp, err
		}
		if resp != nil {
			io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // lets the connection be reused
			resp.Body.Close()
		}
		if err := c.Sleep(req.Context(), wait); err != nil {
			return nil, err
		}
	}
}

// nextWait says whether a result is worth retrying and after how long.
func (c *Transport) nextWait(resp *http.Response, err error, attempt int) (time.Duration, bool) {
	if err != nil {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return 0, false
		}
		return c.backoff(attempt), true
	}
	switch resp.StatusCode {
	case http.StatusTooManyRequests, http.StatusServiceUnavailable:
		if d, ok := serverWait(resp.Header, c.Now()); ok {
			if d > c.MaxWait {
				return 0, false // the server asks for longer than we will wait: let the caller decide
			}
			return d, true
		}
		return c.backoff(attempt), true
	case http.StatusBadGateway, http.StatusGatewayTimeout:
		return c.backoff(attempt), true
	}
	return 0, false
}

// backoff is full jitter: uniform in [0, min(MaxDelay, BaseDelay × 2^(attempt−1))).
func (c *Transport) backoff(attempt int) time.Duration {
	return backoff.Policy{Min: c.BaseDelay, Max: c.MaxDelay, Spread: 1}.Delay(attempt, c.Rand())
}

// serverWait reads Retry-After (seconds or an HTTP date), else the reset
// time of the RateLimit header ("name";r=0;t=SECONDS).
func serverWait(h http.Header, now time.Time) (time.Duration, bool) {
	if v := strings.TrimSpace(h.Get("Retry-After")); v != "" {
		if s, err := strconv.ParseInt(v, 10, 64); err == nil && s >= 0 {
			return time.Duration(s) * time.Second, true
		}
		if at, err := http.ParseTime(v); err == nil {
			return max(at.Sub(now), 0), true
		}
	}
	if v := h.Get("RateLimit"); v != "" {
		for _, param := range strings.Split(v, ";") {
			if k, val, ok := strings.Cut(strings.TrimSpace(param), "="); ok && k == "t" {
				if s, err := strconv.ParseInt(val, 10, 64); err == nil && s >= 0 {
					return time.Duration(s) * time.Second, true
				}
			}
		}
	}
	return 0, false
}

// replayable reports whether a request may be sent again: an idempotent
// method or an Idempotency-Key, and a body that can be produced again.
func replayable(r *http.Request) bool {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
	default:
		if r.Header.Get("Idempotency-Key") == "" {
			return false
		}
	}
	return r.Body == nil || r.Body == http.NoBody || r.GetBody != nil
}

package daemon

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/sluicelabs/sluice/config"
	"github.com/sluicelabs/sluice/internal/backoff"
)

// The daemon can take its rules from a rules service: an HTTP(S) URL it
// polls with conditional GETs. The service answers 304 while the rules are
// unchanged, so a fleet of daemons polling it costs headers, not bodies.
// Bad rules are refused exactly like a bad file (the last good rules stay
// in force); a service that cannot be reached is retried with exponential
// backoff and full jitter, and the daemon keeps deciding on what it has.

const (
	// maxRulesBody caps a rules document fetched from the service, as
	// config.ReadRulesFile caps a rules file.
	maxRulesBody = config.MaxRulesBytes
	// rulesFetchTimeout bounds one fetch, the first one at start included.
	rulesFetchTimeout = 5 * time.Second
	// maxRulesBackoff caps the wait between retries of a failing service
	// (or the poll interval, if that is longer).
	maxRulesBackoff = 5 * time.Minute
)

// errRulesUnchanged reports a fetch that found nothing new: the service
// answered 304 Not Modified, or served the bytes it served last time.
var errRulesUnchanged = errors.New("rules unchanged")

// fetchError is a failure to get a rules document at all (as opposed to
// getting one that is invalid).
type fetchError struct{ err error }

func (e *fetchError) Error() string { return e.err.Error() }
func (e *fetchError) Unwrap() error { return e.err }

// rulesFetcher fetches rules from a URL, remembering the validators of the
// last response so the next request is conditional.
type rulesFetcher struct {
	url    string
	client *http.Client
	// waiter sends long-polls: client's transport without its timeout
	// (each long-poll's context bounds it instead).
	waiter *http.Client

	mu           sync.Mutex // one fetch at a time; guards the fields below
	etag         string
	lastModified string
	digest       []byte // of the last body received, valid or not
}

// newRulesFetcher fetches through a transport of its own, so that closing
// its idle connections (closeIdle) touches no one else's.
func newRulesFetcher(url string) *rulesFetcher {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	return &rulesFetcher{url: url, client: &http.Client{Timeout: rulesFetchTimeout, Transport: tr}, waiter: &http.Client{Transport: tr}}
}

// closeIdle closes the connections kept alive between fetches, and with
// them net/http's goroutines reading them: after the fetch New makes (New
// leaves nothing running) and at Shutdown.
func (f *rulesFetcher) closeIdle() { f.client.CloseIdleConnections() }

// fetch returns the rules the service serves now. It returns
// errRulesUnchanged when there is nothing new, a *fetchError when the
// service could not be asked or did not answer 200 or 304, and the parse
// error (naming the URL, line and field) when the document is invalid. An
// invalid document's validators are kept too, so it is reported once, not
// at every poll.
//
// With the rules it returns the document they were parsed from, for the
// rules cache.
func (f *rulesFetcher) fetch(ctx context.Context) (*config.Rules, []byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.url, nil)
	if err != nil {
		return nil, nil, &fetchError{fmt.Errorf("fetch rules %s: %w", f.url, err)}
	}
	req.Header.Set("Accept", "application/yaml, text/yaml, text/plain;q=0.9, */*;q=0.5")
	if f.etag != "" {
		req.Header.Set("If-None-Match", f.etag)
	}
	if f.lastModified != "" {
		req.Header.Set("If-Modified-Since", f.lastModified)
	}
	resp, err := f.client.Do(req)
	if err != nil {
		return nil, nil, &fetchError{fmt.Errorf("fetch rules: %w", err)}
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusNotModified:
		return nil, nil, errRulesUnchanged
	case http.StatusOK:
	default:
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // let the connection be reused
		return nil, nil, &fetchError{fmt.Errorf("fetch rules %s: %s", f.url, resp.Status)}
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxRulesBody+1))
	if err != nil {
		return nil, nil, &fetchError{fmt.Errorf("fetch rules %s: read body: %w", f.url, err)}
	}
	if len(body) > maxRulesBody {
		return nil, nil, &fetchError{fmt.Errorf("fetch rules %s: %w: larger than the cap of %d bytes", f.url, config.ErrRulesTooLarge, maxRulesBody)}
	}
	f.etag, f.lastModified = resp.Header.Get("ETag"), resp.Header.Get("Last-Modified")
	sum := sha256.Sum256(body)
	if bytes.Equal(sum[:], f.digest) {
		return nil, nil, errRulesUnchanged
	}
	f.digest = sum[:]
	rules, err := config.ParseRules(f.url, body)
	if err != nil {
		return nil, nil, err
	}
	return rules, body, nil
}

// awaitChange long-polls the service: a conditional GET on the last
// response's validators with "Prefer: wait=N", which a service that
// supports it (sluice-rules) holds until its rules change or N seconds
// pass. It reports whether the service answered with a document (200),
// whose body it discards: the caller then reloads through fetch, which
// keeps every rule of validation and of the reload in one place. A
// *fetchError reports a service that could not be asked or answered
// neither 200 nor 304. It does not hold f.mu while it waits.
func (f *rulesFetcher) awaitChange(ctx context.Context, wait time.Duration) (bool, error) {
	f.mu.Lock()
	etag, lastModified := f.etag, f.lastModified
	f.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, wait+rulesFetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.url, nil)
	if err != nil {
		return false, &fetchError{fmt.Errorf("long-poll rules %s: %w", f.url, err)}
	}
	req.Header.Set("Accept", "application/yaml, text/yaml, text/plain;q=0.9, */*;q=0.5")
	if etag != "" {
		req.Header.Set("If-None-Match", etag)
	}
	if lastModified != "" {
		req.Header.Set("If-Modified-Since", lastModified)
	}
	req.Header.Set("Prefer", "wait="+strconv.FormatInt(int64(wait/time.Second), 10))
	resp, err := f.waiter.Do(req)
	if err != nil {
		return false, &fetchError{fmt.Errorf("long-poll rules: %w", err)}
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, io.LimitReader(resp.Body, maxRulesBody)) // let the connection be reused
	switch resp.StatusCode {
	case http.StatusNotModified:
		return false, nil
	case http.StatusOK:
		return true, nil
	default:
		return false, &fetchError{fmt.Errorf("long-poll rules %s: %s", f.url, resp.Status)}
	}
}

// longPollPause is how long to pause after a long-poll round that took
// elapsed and applied (or not) new rules: none after a round the service
// held (at least half the wait) or that brought new rules, else the poll
// interval, so a service that does not hold requests (a static web server
// answering 304 at once, or 200 without validators) is polled as often as
// without long-poll, not in a tight loop.
func longPollPause(elapsed, wait, interval time.Duration, applied bool) time.Duration {
	if applied || elapsed >= wait/2 {
		return 0
	}
	return interval
}

// retryDelay is the wait before retry number failures (1, 2, ...) of a
// rules service that failed: exponential from min(interval, 1s), capped at
// max(interval, maxRulesBackoff), with full jitter over its upper half so a
// fleet does not retry in step. jitter returns a value in [0, 1).
func retryDelay(failures int, interval time.Duration, jitter func() float64) time.Duration {
	p := backoff.Policy{Min: min(interval, time.Second), Max: max(interval, maxRulesBackoff), Spread: 0.5}
	return p.Delay(failures, jitter())
}

// pollRules polls the rules service until ctx ends: every poll interval
// (±10%) while it answers, backing off while it fails; with RulesWait, by
// long-poll (longPollRules).
func (d *Daemon) pollRules(ctx context.Context) {
	if d.settings.RulesWait > 0 {
		d.longPollRules(ctx)
		return
	}
	interval := d.settings.RulesPollInterval
	failures := 0
	if d.fetchFailing.Load() {
		failures = 1 // the fetch at start failed: retry soon
	}
	for {
		wait := interval - interval/10 + time.Duration(rand.Float64()*float64(interval/5))
		if failures > 0 {
			wait = retryDelay(failures, interval, rand.Float64)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		var fe *fetchError
		if err := d.Reload(); errors.As(err, &fe) {
			failures++
		} else {
			failures = 0
		}
	}
}

// longPollRules asks the service for a change over and over, each request
// held by the service up to RulesWait, and reloads when it answers with
// one. Failures back off as in pollRules; a service that does not hold
// requests is asked every poll interval (longPollPause).
func (d *Daemon) longPollRules(ctx context.Context) {
	interval, wait := d.settings.RulesPollInterval, d.settings.RulesWait
	failures := 0
	if d.fetchFailing.Load() {
		failures = 1
	}
	pause := time.Duration(0)
	for {
		if failures > 0 {
			pause = retryDelay(failures, interval, rand.Float64)
		}
		if pause > 0 {
			t := time.NewTimer(pause)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
		if ctx.Err() != nil {
			return
		}
		start := time.Now()
		changed, err := d.fetcher.awaitChange(ctx, wait)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			d.noteFetch(err)
			failures++
			continue
		}
		applied := false
		if changed {
			before := d.Rules()
			var fe *fetchError
			if err := d.Reload(); errors.As(err, &fe) {
				failures++
				continue
			}
			applied = d.Rules() != before
		} else {
			d.noteFetch(nil)
		}
		failures = 0
		pause = longPollPause(time.Since(start), wait, interval, applied)
	}
}

// reloadFromURL fetches the rules and reports what Reload should do: apply
// rules (parsed from body), or nothing (nil, nil, nil) when they are unchanged.
func (d *Daemon) reloadFromURL() (*config.Rules, []byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), rulesFetchTimeout)
	defer cancel()
	rules, body, err := d.fetcher.fetch(ctx)
	var fe *fetchError
	switch {
	case errors.Is(err, errRulesUnchanged):
		d.noteFetch(nil)
		return nil, nil, nil
	case errors.As(err, &fe):
		d.noteFetch(err)
		return nil, nil, err
	}
	d.noteFetch(nil)
	return rules, body, err
}

// noteFetch records whether the rules service answered.
func (d *Daemon) noteFetch(err error) {
	if err == nil {
		d.fetchFailing.Store(false)
		d.lastFetchError.Store(nil)
		d.lastFetchOK.Store(time.Now().Unix())
		return
	}
	was := d.fetchFailing.Swap(true)
	d.metrics.fetchErrors.Inc()
	msg := err.Error()
	d.lastFetchError.Store(&msg)
	if !was {
		d.log.Warn("rules service unreachable; keeping the rules in force and retrying with backoff", "url", d.settings.RulesURL, "error", err)
	} else {
		d.log.Debug("rules service still unreachable", "error", err)
	}
}

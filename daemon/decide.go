package daemon

import (
	"errors"
	"math"
	"math/rand/v2"
	"time"

	"github.com/sluicelabs/sluice/bucket"
	"github.com/sluicelabs/sluice/config"
	"github.com/sluicelabs/sluice/ipc"
)

// Decide implements ipc.Decider. It reads the clock once. A single check is
// taken atomically; several are first all checked, and charged only if all
// admit. A check with a MaxDelay that would be refused is instead charged and
// marked delayed when its turn comes within MaxDelay. Between the check and the charge another request may spend the same
// tokens, so concurrent multi-checks can overshoot by the requests in flight,
// pushing a balance below zero; that errs toward admitting, as the cluster does.
func (d *Daemon) Decide(checks []ipc.Check, results []ipc.Result) (bool, error) {
	// Timing every decision would add two clock reads and a histogram update
	// to a ~200 ns path (measured: +55%); one decision in latencySample is
	// timed, picked by the runtime's per-thread random source.
	if rand.Uint32()%latencySample != 0 {
		return d.decide(checks, results)
	}
	start := time.Now()
	allowed, err := d.decide(checks, results)
	d.metrics.latency.Observe(time.Since(start).Seconds())
	return allowed, err
}

// latencySample is the sampling rate of the decision latency histogram.
const latencySample = 64

// ClientReport implements ipc.Reporter: it counts the calls a client
// decided without the daemon. The server has already bounded the report
// (ipc.ServerConfig.MaxReportBurst, MaxReportRate) and logged it, rate
// limited and attributed to the client's name and uid; the counters carry
// no per-client label, so clients cannot grow the series.
func (d *Daemon) ClientReport(client string, r ipc.Report) {
	d.metrics.clientFailedOpen.Add(float64(r.FailedOpen))
	d.metrics.clientFailedClosed.Add(float64(r.FailedClosed))
}

func (d *Daemon) decide(checks []ipc.Check, results []ipc.Result) (bool, error) {
	defer leave(d.fence.enter())
	now := d.now()
	rs := d.rules.Load()
	if len(checks) == 1 {
		c := &checks[0]
		ar, ok := rs.byName[string(c.Rule)]
		if !ok {
			return unknownRule(rs, &results[0]), nil
		}
		if len(ar.ns) == 1 {
			return d.decideOne(ar, c, &results[0], now)
		}
	}
	return d.decideAll(rs, checks, results, now)
}

// decideOne decides a request of one check of a rule with one limit, the
// common case, in one step on the store (no check-then-charge window).
func (d *Daemon) decideOne(ar activeRule, c *ipc.Check, result *ipc.Result, now time.Time) (bool, error) {
	lim := ar.LimitFor(c.Key)
	cost := int64(min(c.Cost, bucket.MaxCost+1))
	var r bucket.Result
	var soft bool
	var err error
	switch {
	case c.MaxDelay > 0:
		r, err = d.store.Reserve(ar.ns[0], c.Key, lim, cost, c.MaxDelay, now)
	case ar.SoftPercent > 0:
		r, soft, err = d.store.TakeOverdraft(ar.ns[0], c.Key, lim, cost, softMargin(ar, lim), now)
	default:
		r, err = d.store.Take(ar.ns[0], c.Key, lim, cost, now)
	}
	if err != nil {
		return false, requestError(err)
	}
	*result = toResult(r, lim)
	switch {
	case soft:
		result.Status = ipc.StatusSoft
	case !r.Allowed && ar.Shadow:
		result.Status = ipc.StatusShadowDenied // admitted; the limit would have refused
	}
	ar.counted.count(result.Status)
	return result.Status.Admits(), nil
}

// decideAll decides several checks, or a rule with several limits: every
// limit of every check is checked first, and all are charged only if all
// admit. A check's result reports its binding limit: the refusing limit that
// frees up last, or when all admit, the one with the least remaining.
func (d *Daemon) decideAll(rs *ruleSet, checks []ipc.Check, results []ipc.Result, now time.Time) (bool, error) {
	allowed := true
	for i := range checks {
		c := &checks[i]
		ar, ok := rs.byName[string(c.Rule)]
		if !ok {
			allowed = unknownRule(rs, &results[i]) && allowed
			continue
		}
		cost := int64(min(c.Cost, bucket.MaxCost+1))
		refused, delayed, soft := false, false, false
		bindRefused := false
		for j, lim := range ar.LimitsFor(c.Key) {
			var r bucket.Result
			var s bool
			var err error
			if ar.SoftPercent > 0 && c.MaxDelay == 0 {
				r, s, err = d.store.CheckOverdraft(ar.ns[j], c.Key, lim, cost, softMargin(ar, lim), now)
			} else {
				r, err = d.store.Check(ar.ns[j], c.Key, lim, cost, now)
			}
			if err != nil {
				return false, requestError(err)
			}
			soft = soft || s
			one := toResult(r, lim)
			switch {
			case r.Allowed:
			case c.MaxDelay > 0 && r.RetryAfter <= c.MaxDelay && lim.Algorithm().Reserves():
				delayed = true // its turn comes in time: charged below, the caller waits
			default:
				refused = true
			}
			// The binding limit: a refusing (or delaying) one over one that
			// admits, the later of two that refuse, the tighter of two that admit.
			denies := !r.Allowed
			switch {
			case j == 0, denies && !bindRefused,
				denies && one.RetryAfter > results[i].RetryAfter,
				!denies && !bindRefused && one.Remaining < results[i].Remaining:
				results[i], bindRefused = one, denies
			}
		}
		switch {
		case refused && ar.Shadow:
			results[i].Status = ipc.StatusShadowDenied // admitted, not charged below
			continue
		case refused:
			results[i].Status = ipc.StatusOverLimit
		case delayed:
			results[i].Status = ipc.StatusDelayed
		case soft:
			results[i].Status = ipc.StatusSoft // within the soft margin: charged below if all admit
		default:
			results[i].Status = ipc.StatusOK
		}
		allowed = allowed && !refused
	}
	for i := range checks {
		if ar, ok := rs.byName[string(checks[i].Rule)]; ok {
			st := results[i].Status
			if !allowed && st.Admits() {
				st = ipc.StatusOverLimit // not admitted: another check refused the request
			}
			ar.counted.count(st)
		}
	}
	if !allowed {
		return false, nil
	}
	for i := range checks {
		c := &checks[i]
		ar, ok := rs.byName[string(c.Rule)]
		if !ok || results[i].Status == ipc.StatusShadowDenied {
			continue
		}
		for j, lim := range ar.LimitsFor(c.Key) {
			// Cannot fail: the key and cost passed Check above.
			_, _ = d.store.Charge(ar.ns[j], c.Key, lim, int64(c.Cost), now)
			d.store.Record(ar.ns[j], c.Key, lim, int64(c.Cost), now)
		}
	}
	return true, nil
}

// softMargin is how far below zero a soft rule admits, in tokens.
func softMargin(ar activeRule, lim bucket.Limit) int64 {
	return int64(math.Ceil(ar.SoftPercent / 100 * float64(lim.Burst())))
}

func unknownRule(rs *ruleSet, r *ipc.Result) bool {
	if rs.rules.UnknownRule == config.UnknownRuleDeny {
		*r = ipc.Result{Status: ipc.StatusUnknownRule}
		return false
	}
	*r = ipc.Result{Status: ipc.StatusUnknownRuleAllowed}
	return true
}

func toResult(r bucket.Result, lim bucket.Limit) ipc.Result {
	st := ipc.StatusOK
	switch {
	case !r.Allowed:
		st = ipc.StatusOverLimit
	case r.RetryAfter > 0:
		st = ipc.StatusDelayed // reserved: go ahead after RetryAfter
	}
	return ipc.Result{Status: st, Limit: uint64(r.Limit), Remaining: uint64(r.Remaining), RetryAfter: r.RetryAfter, ResetAfter: r.ResetAfter, Period: lim.Period()}
}

// requestError maps the store's refusals onto protocol error codes.
func requestError(err error) error {
	code := ipc.CodeInternal
	switch {
	case errors.Is(err, bucket.ErrBadCost):
		code = ipc.CodeBadCost
	case errors.Is(err, bucket.ErrKeyTooLong):
		code = ipc.CodeKeyTooLong
	case errors.Is(err, bucket.ErrEmptyKey):
		code = ipc.CodeBadRequest
	}
	return &ipc.Error{Code: code, Message: err.Error()}
}

// Inspect implements ipc.Inspector: it reads a key's bucket without charging it.
func (d *Daemon) Inspect(rule, key []byte) ipc.Inspection {
	defer leave(d.fence.enter())
	ar, ok := d.rules.Load().byName[string(rule)]
	if !ok {
		return ipc.Inspection{}
	}
	lim := ar.LimitFor(key)
	b, _ := d.store.Balance(ar.ns[0], key, lim, d.now())
	return ipc.Inspection{Known: true, Balance: b, Limit: uint64(lim.Count()), Burst: uint64(lim.Burst())}
}

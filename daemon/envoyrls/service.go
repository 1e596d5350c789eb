package envoyrls

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicelabs/sluice/clientlib"
	"github.com/sluicelabs/sluice/config"
	"github.com/sluicelabs/sluice/ipc"
)

// Decider is what the service asks: the daemon. Both methods are called
// concurrently from every gRPC call and must be safe for that; neither may
// block on the network.
type Decider interface {
	// Decide decides checks together, as ipc.Decider does: results[i] is
	// checks[i]'s, and when several are given all are charged only if all
	// admit.
	Decide(checks []ipc.Check, results []ipc.Result) (bool, error)
	// Rules returns the rules in force; their Envoy field is the
	// configuration requests are matched against.
	Rules() *config.Rules
}

// Config configures a Service.
type Config struct {
	// Decider decides; required.
	Decider Decider
	// MaxKeyLen is the daemon's longest key: longer keys are shortened with
	// clientlib.BoundedKey. 0 leaves keys as built.
	MaxKeyLen int
	// MaxDescriptors caps the descriptors of one call (more is
	// InvalidArgument). Default 64.
	MaxDescriptors int
	// ResponseHeaders adds the RateLimit and RateLimit-Policy headers.
	ResponseHeaders bool
}

// Service implements rlsv3.RateLimitServiceServer.
type Service struct {
	rlsv3.UnimplementedRateLimitServiceServer
	cfg  Config
	pool sync.Pool // *call
}

// NewService returns a Service deciding through cfg.Decider.
func NewService(cfg Config) *Service {
	if cfg.MaxDescriptors <= 0 {
		cfg.MaxDescriptors = 64
	}
	s := &Service{cfg: cfg}
	s.pool.New = func() any { return new(call) }
	return s
}

// call holds one call's scratch space, reused across calls.
type call struct {
	entries []config.EnvoyEntry
	limits  []*config.EnvoyLimit
	checks  []ipc.Check
	results []ipc.Result
	which   []int // checks[j] decides descriptor which[j]
	// keys and rules hold the checks' keys and rule names back to back,
	// ending at keyEnds and ruleEnds; decide cuts them once all are built
	// (appending may move the buffers).
	keys, rules       []byte
	keyEnds, ruleEnds []int
}

// Errors a call is refused with (as gRPC InvalidArgument).
var (
	ErrEmptyDomain      = errors.New("rate limit domain must not be empty")
	ErrNoDescriptors    = errors.New("rate limit descriptor list must not be empty")
	ErrTooManyDescripts = errors.New("too many descriptors in one request")
	ErrEmptyEntries     = errors.New("a descriptor has no entries")
)

// ShouldRateLimit decides a request: one status per descriptor, overall
// OVER_LIMIT if any descriptor is over its limit.
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if err := ctx.Err(); err != nil {
		return nil, status.FromContextError(err).Err()
	}
	domain, descs := req.GetDomain(), req.GetDescriptors()
	switch {
	case domain == "":
		return nil, status.Error(codes.InvalidArgument, ErrEmptyDomain.Error())
	case len(descs) == 0:
		return nil, status.Error(codes.InvalidArgument, ErrNoDescriptors.Error())
	case len(descs) > s.cfg.MaxDescriptors:
		return nil, status.Errorf(codes.InvalidArgument, "%v: %d, at most %d", ErrTooManyDescripts, len(descs), s.cfg.MaxDescriptors)
	}
	env := s.cfg.Decider.Rules().Envoy
	c := s.pool.Get().(*call)
	defer s.pool.Put(c)
	c.limits = c.limits[:0]
	for _, d := range descs {
		c.entries = c.entries[:0]
		for _, e := range d.GetEntries() {
			c.entries = append(c.entries, config.EnvoyEntry{Key: e.GetKey(), Value: e.GetValue()})
		}
		if len(c.entries) == 0 {
			return nil, status.Error(codes.InvalidArgument, ErrEmptyEntries.Error())
		}
		c.limits = append(c.limits, env.Lookup(domain, c.entries))
	}
	replaced(c.limits)

	resp := &rlsv3.RateLimitResponse{
		OverallCode: rlsv3.RateLimitResponse_OK,
		Statuses:    make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(descs)),
	}
	// Build the checks: one per descriptor whose limit counts.
	c.checks, c.which = c.checks[:0], c.which[:0]
	c.keys, c.rules, c.keyEnds, c.ruleEnds = c.keys[:0], c.rules[:0], c.keyEnds[:0], c.ruleEnds[:0]
	refused := false
	for i, lim := range c.limits {
		st := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
		resp.Statuses[i] = st
		switch {
		case lim == nil:
			continue // no limit applies
		case lim.Unlimited:
			st.LimitRemaining = math.MaxUint32
			continue
		}
		st.CurrentLimit = currentLimit(lim)
		cost := cost(req, descs[i])
		if lim.Rule == "" || cost > uint64(lim.RequestsPerUnit) {
			// requests_per_unit 0, or a cost no window can hold.
			if !lim.Shadow {
				st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
				refused = true
			}
			continue
		}
		c.keys = appendKey(c.keys, domain, descs[i].GetEntries())
		c.keyEnds = append(c.keyEnds, len(c.keys))
		c.rules = append(c.rules, lim.Rule...)
		c.ruleEnds = append(c.ruleEnds, len(c.rules))
		c.checks = append(c.checks, ipc.Check{Cost: cost})
		c.which = append(c.which, i)
	}
	if len(c.checks) > 0 && !refused {
		if err := s.decide(c); err != nil {
			return nil, err
		}
		for j, i := range c.which {
			st := resp.Statuses[i]
			r := &c.results[j]
			st.LimitRemaining = uint32(min(r.Remaining, math.MaxUint32))
			reset := r.ResetAfter
			switch r.Status {
			case ipc.StatusOverLimit:
				st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
				st.LimitRemaining = 0
				reset = max(r.RetryAfter, reset)
			case ipc.StatusShadowDenied:
				st.LimitRemaining = 0
			}
			st.DurationUntilReset = durationpb.New(reset)
		}
	}
	for _, st := range resp.Statuses {
		if st.Code == rlsv3.RateLimitResponse_OVER_LIMIT {
			resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		}
	}
	if s.cfg.ResponseHeaders {
		resp.ResponseHeadersToAdd = headers(resp.Statuses, c.limits)
	}
	return resp, nil
}

// decide asks the Decider about c.checks, giving each its key and rule.
func (s *Service) decide(c *call) error {
	start, rstart := 0, 0
	for j := range c.checks {
		c.checks[j].Rule, rstart = c.rules[rstart:c.ruleEnds[j]:c.ruleEnds[j]], c.ruleEnds[j]
		k := c.keys[start:c.keyEnds[j]:c.keyEnds[j]]
		if s.cfg.MaxKeyLen > 0 && len(k) > s.cfg.MaxKeyLen {
			k = []byte(clientlib.BoundedKey(string(k), s.cfg.MaxKeyLen))
		}
		c.checks[j].Key = k
		start = c.keyEnds[j]
	}
	if cap(c.results) < len(c.checks) {
		c.results = make([]ipc.Result, len(c.checks))
	}
	c.results = c.results[:len(c.checks)]
	if _, err := s.cfg.Decider.Decide(c.checks, c.results); err != nil {
		return status.Errorf(codes.Internal, "deciding: %v", err)
	}
	return nil
}

// replaced drops (sets to nil) every limit whose name another matched limit
// replaces, as ratelimit does.
func replaced(limits []*config.EnvoyLimit) {
	for _, a := range limits {
		if a == nil || len(a.Replaces) == 0 {
			continue
		}
		for i, b := range limits {
			if b != nil && b.Name != "" && !b.Unlimited {
				for _, name := range a.Replaces {
					if name == b.Name {
						limits[i] = nil
						break
					}
				}
			}
		}
	}
}

// cost is the descriptor's hits_addend, else the request's; 0 means 1.
func cost(req *rlsv3.RateLimitRequest, d *ratelimitv3.RateLimitDescriptor) uint64 {
	if v := d.GetHitsAddend().GetValue(); v > 0 {
		return v
	}
	return uint64(max(req.GetHitsAddend(), 1))
}

func currentLimit(lim *config.EnvoyLimit) *rlsv3.RateLimitResponse_RateLimit {
	return &rlsv3.RateLimitResponse_RateLimit{
		Name:            lim.Name,
		RequestsPerUnit: lim.RequestsPerUnit,
		Unit:            rlsv3.RateLimitResponse_RateLimit_Unit(rlsv3.RateLimitResponse_RateLimit_Unit_value[strings.ToUpper(lim.Unit)]),
	}
}

// entry is a descriptor entry as the generated type has it.
type entry interface {
	GetKey() string
	GetValue() string
}

// appendKey appends the bucket key of a descriptor: the domain and each
// entry as key=value, '/'-separated, with '%' and '/' in them escaped so
// that different entry lists never share a key.
func appendKey[E entry](b []byte, domain string, entries []E) []byte {
	b = appendEscaped(b, domain)
	for _, e := range entries {
		b = append(b, '/')
		b = appendEscaped(b, e.GetKey())
		b = append(b, '=')
		b = appendEscaped(b, e.GetValue())
	}
	return b
}

func appendEscaped(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '%':
			b = append(b, "%25"...)
		case '/':
			b = append(b, "%2F"...)
		case '=':
			b = append(b, "%3D"...)
		default:
			b = append(b, c)
		}
	}
	return b
}

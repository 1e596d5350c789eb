package envoyrls

import (
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicelabs/sluice/config"
)

// headers are the IETF RateLimit and RateLimit-Policy headers of the
// descriptor closest to its limit (an over-limit one first), as ratelimit
// picks it; none when no descriptor had a limit.
func headers(sts []*rlsv3.RateLimitResponse_DescriptorStatus, limits []*config.EnvoyLimit) []*corev3.HeaderValue {
	best := -1
	for i, st := range sts {
		if st.CurrentLimit == nil || limits[i] == nil {
			continue
		}
		if best < 0 || over(st) && !over(sts[best]) || over(st) == over(sts[best]) && st.LimitRemaining < sts[best].LimitRemaining {
			best = i
		}
	}
	if best < 0 {
		return nil
	}
	st, lim := sts[best], limits[best]
	name := lim.Name
	if name == "" {
		name = "default"
	}
	reset := time.Duration(0)
	if st.DurationUntilReset != nil {
		reset = st.DurationUntilReset.AsDuration()
	}
	q := sfString(name)
	return []*corev3.HeaderValue{
		{Key: "RateLimit-Policy", Value: q + ";q=" + itoa(uint64(lim.RequestsPerUnit)) + ";w=" + itoa(ceilSeconds(lim.Period))},
		{Key: "RateLimit", Value: q + ";r=" + itoa(uint64(st.LimitRemaining)) + ";t=" + itoa(ceilSeconds(reset))},
	}
}

func over(st *rlsv3.RateLimitResponse_DescriptorStatus) bool {
	return st.Code == rlsv3.RateLimitResponse_OVER_LIMIT
}

// sfString quotes s as a structured-field string (RFC 8941): printable
// ASCII, with '"' and '\\' escaped; other bytes are dropped.
func sfString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c >= 0x20 && c < 0x7f:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

func itoa(v uint64) string { return strconv.FormatUint(v, 10) }

// ceilSeconds rounds d up to whole seconds.
func ceilSeconds(d time.Duration) uint64 {
	if d <= 0 {
		return 0
	}
	return uint64((d + time.Second - 1) / time.Second)
}

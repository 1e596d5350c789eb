package httplimit

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// Identity says how to build a client's key from a request. The first source
// that yields a value wins, in field order: Header, User, client IP.
type Identity struct {
	// Header names a request header carrying an API key (e.g. "X-API-Key").
	Header string
	// User returns the authenticated user the application established, or "".
	User func(*http.Request) string
	// ClientIP keys anonymous requests by the client's address.
	ClientIP bool
	// TrustedProxies are the peers whose forwarding header (see
	// ForwardedHeader) is believed. A request from any other peer is keyed
	// by the peer's own address, so a client cannot choose its key by
	// sending the header itself.
	TrustedProxies []netip.Prefix
	// ForwardedHeader names the one forwarding header the trusted proxies
	// write: HeaderXForwardedFor (the default when empty) or
	// HeaderForwarded (RFC 7239). The other header is never read, so a
	// client cannot pick its key by adding the header its proxies do not
	// touch and would pass through unchanged.
	ForwardedHeader string
	// Anonymous is the key of requests that yield no identity. Default "anonymous".
	Anonymous string
}

// The forwarding headers Identity.ForwardedHeader may name.
const (
	HeaderXForwardedFor = "X-Forwarded-For"
	HeaderForwarded     = "Forwarded"
)

// CanonicalForwardedHeader returns the canonical name of a forwarding header
// ("" means X-Forwarded-For), or an error naming the two it may be.
func CanonicalForwardedHeader(name string) (string, error) {
	switch {
	case name == "" || strings.EqualFold(name, HeaderXForwardedFor):
		return HeaderXForwardedFor, nil
	case strings.EqualFold(name, HeaderForwarded):
		return HeaderForwarded, nil
	}
	return "", fmt.Errorf("forwarded header %q: want %s or %s", name, HeaderXForwardedFor, HeaderForwarded)
}

// ParsePrefixes parses addresses and CIDR prefixes ("10.0.0.0/8", "127.0.0.1").
func ParsePrefixes(list []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(list))
	for _, s := range list {
		s = strings.TrimSpace(s)
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("trusted proxy %q: not an address or prefix", s)
		}
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}

// Key returns the client's key, prefixed by its source ("key:", "user:",
// "ip:") so an API key can never collide with an address.
func (id *Identity) Key(r *http.Request) string {
	if id.Header != "" {
		if v := r.Header.Get(id.Header); v != "" {
			return "key:" + v
		}
	}
	if id.User != nil {
		if u := id.User(r); u != "" {
			return "user:" + u
		}
	}
	if id.ClientIP {
		if a, ok := id.ClientAddr(r); ok {
			return "ip:" + a.String()
		}
	}
	if id.Anonymous != "" {
		return id.Anonymous
	}
	return "anonymous"
}

func (id *Identity) trusted(a netip.Addr) bool {
	for _, p := range id.TrustedProxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// ClientAddr returns the address of the client that sent r: the peer itself,
// or, when the peer is a trusted proxy, the nearest untrusted address in the
// forwarding chain (read right to left, the only direction that cannot be forged).
func (id *Identity) ClientAddr(r *http.Request) (netip.Addr, bool) {
	peer, ok := parseHost(r.RemoteAddr)
	if !ok {
		return netip.Addr{}, false
	}
	if !id.trusted(peer) {
		return peer, true
	}
	chain := forwardedChain(r, strings.EqualFold(id.ForwardedHeader, HeaderForwarded))
	for i := len(chain) - 1; i >= 0; i-- {
		a, ok := parseHost(chain[i])
		if !ok {
			return peer, true // garbage in the chain: stop believing it
		}
		if !id.trusted(a) {
			return a, true
		}
		peer = a
	}
	return peer, true // every hop trusted: the leftmost is as close as we get
}

// forwardedChain lists the addresses a request passed through, client first,
// from Forwarded (RFC 7239) when forwarded is set, else from X-Forwarded-For;
// never from both.
func forwardedChain(r *http.Request, forwarded bool) []string {
	var chain []string
	if forwarded {
		for _, line := range r.Header.Values(HeaderForwarded) {
			for _, elem := range strings.Split(line, ",") {
				for _, pair := range strings.Split(elem, ";") {
					k, v, ok := strings.Cut(strings.TrimSpace(pair), "=")
					if ok && strings.EqualFold(k, "for") {
						chain = append(chain, strings.Trim(v, `"`))
					}
				}
			}
		}
		return chain
	}
	for _, line := range r.Header.Values(HeaderXForwardedFor) {
		for _, a := range strings.Split(line, ",") {
			chain = append(chain, strings.TrimSpace(a))
		}
	}
	return chain
}

// parseHost accepts "1.2.3.4", "1.2.3.4:80", "[::1]:80" and "::1".
func parseHost(s string) (netip.Addr, bool) {
	s = strings.TrimSpace(s)
	if a, err := netip.ParseAddr(strings.Trim(s, "[]")); err == nil {
		return a.Unmap(), true
	}
	host, _, err := net.SplitHostPort(s)
	if err != nil {
		return netip.Addr{}, false
	}
	a, err := netip.ParseAddr(host)
	return a.Unmap(), err == nil
}

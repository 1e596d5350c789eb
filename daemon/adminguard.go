package daemon

import (
	"mime"
	"net"
	"net/http"
	"strings"

	"github.com/sluicelabs/sluice/daemon/adminapi"
)

// AdminHeader is the header a request that changes the daemon's state must
// carry (any non-empty value; the sluice CLI sends "1"), unless its body is
// JSON. Either makes the request one a web page cannot send cross-origin
// without the browser asking the daemon first (a CORS preflight), which the
// daemon never grants: a page the operator visits cannot reload rules or
// reset keys behind their back.
const AdminHeader = adminapi.Header

// requireNonSimple refuses requests that change state (every method but GET,
// HEAD and OPTIONS) unless they carry AdminHeader or a JSON content type,
// with 403 and a body that says what is missing. Nothing is changed.
func requireNonSimple(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet, http.MethodHead, http.MethodOptions:
			next.ServeHTTP(w, r)
			return
		}
		if r.Header.Get(AdminHeader) != "" || isJSON(r.Header.Get("Content-Type")) {
			next.ServeHTTP(w, r)
			return
		}
		writeJSONStatus(w, http.StatusForbidden, map[string]string{"error": r.Method +
			" changes the daemon's state and needs the header \"" + AdminHeader + ": 1\" or Content-Type application/json" +
			" (so that a web page cannot send it); the sluice CLI sends the header"})
	})
}

func isJSON(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && mt == "application/json"
}

// hostGuard admits requests whose Host header names the admin endpoint: its
// bound address, localhost (when bound to loopback or to every address), or
// one of the operator's extra names. A wildcard bind (0.0.0.0, ::) admits
// any IP literal with the bound port. Everything else is answered 421: a
// page served from a name the attacker controls and re-pointed at 127.0.0.1
// (DNS rebinding) sends its own name as Host, so it cannot read or change
// anything here. IP literals cannot be rebound, so they need no list.
type hostGuard struct {
	next     http.Handler
	port     string
	ip       net.IP // the bound IP; unspecified for a wildcard bind
	loopback bool   // localhost is allowed
	names    map[string]bool
	bound    string // for the refusal's message
}

// newHostGuard guards next for a listener bound at bound (its real address,
// port resolved), admitting also the names in extra (HOST or HOST:PORT).
func newHostGuard(next http.Handler, bound net.Addr, extra []string) *hostGuard {
	g := &hostGuard{next: next, names: map[string]bool{}, bound: bound.String()}
	host, port, _ := net.SplitHostPort(bound.String())
	g.port = port
	g.ip = net.ParseIP(host)
	g.loopback = g.ip == nil || g.ip.IsLoopback() || g.ip.IsUnspecified()
	for _, n := range extra {
		n = strings.ToLower(strings.TrimSpace(n))
		if n == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(n); err != nil {
			n = net.JoinHostPort(n, port) // a bare name: at the bound port
		}
		g.names[n] = true
	}
	return g
}

// allowed reports whether a Host header names this endpoint.
func (g *hostGuard) allowed(hostHeader string) bool {
	h := strings.ToLower(hostHeader)
	host, port, err := net.SplitHostPort(h)
	if err != nil {
		host, port = strings.Trim(h, "[]"), "80" // no port: http's default
	}
	if g.names[net.JoinHostPort(host, port)] {
		return true
	}
	if port != g.port {
		return false
	}
	if host == "localhost" {
		return g.loopback
	}
	ip := net.ParseIP(host)
	switch {
	case ip == nil:
		return false
	case g.ip == nil || g.ip.IsUnspecified():
		return true
	}
	return ip.Equal(g.ip)
}

func (g *hostGuard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !g.allowed(r.Host) {
		writeJSONStatus(w, http.StatusMisdirectedRequest, map[string]string{"error": "the request's Host header does not name this admin endpoint (" +
			g.bound + "); use its address, or start sluiced with --admin-allowed-hosts NAME to answer to another name"})
		return
	}
	g.next.ServeHTTP(w, r)
}

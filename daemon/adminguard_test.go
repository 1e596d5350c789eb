package daemon

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestHostGuard(t *testing.T) {
	tcp := func(s string) net.Addr { a, _ := net.ResolveTCPAddr("tcp", s); return a }
	tests := []struct {
		bound string
		extra []string
		host  string
		ok    bool
	}{
		{"127.0.0.1:9464", nil, "127.0.0.1:9464", true},
		{"127.0.0.1:9464", nil, "localhost:9464", true},
		{"127.0.0.1:9464", nil, "LOCALHOST:9464", true},
		{"127.0.0.1:9464", nil, "attacker.example:9464", false}, // DNS rebinding
		{"127.0.0.1:9464", nil, "127.0.0.1:9465", false},
		{"127.0.0.1:9464", nil, "127.0.0.2:9464", false},
		{"127.0.0.1:9464", nil, "127.0.0.1", false}, // port 80
		{"127.0.0.1:9464", nil, "", false},
		{"127.0.0.1:9464", []string{"sluice.internal"}, "sluice.internal:9464", true},
		{"127.0.0.1:9464", []string{"sluice.internal"}, "sluice.internal:80", false},
		{"127.0.0.1:9464", []string{"sluice.internal:443"}, "sluice.internal:443", true},
		{"127.0.0.1:80", nil, "127.0.0.1", true},
		{"[::1]:9464", nil, "[::1]:9464", true},
		{"[::1]:9464", nil, "localhost:9464", true},
		{"10.1.2.3:9464", nil, "localhost:9464", false}, // not loopback
		{"10.1.2.3:9464", nil, "10.1.2.3:9464", true},
		{"0.0.0.0:9464", nil, "10.9.9.9:9464", true}, // any IP literal: cannot be rebound
		{"0.0.0.0:9464", nil, "localhost:9464", true},
		{"0.0.0.0:9464", nil, "evil.example:9464", false},
	}
	for _, tt := range tests {
		g := newHostGuard(http.NotFoundHandler(), tcp(tt.bound), tt.extra)
		if got := g.allowed(tt.host); got != tt.ok {
			t.Errorf("bound %s extra %v: Host %q allowed %v, want %v", tt.bound, tt.extra, tt.host, got, tt.ok)
		}
	}
	g := newHostGuard(http.NotFoundHandler(), tcp("127.0.0.1:9464"), nil)
	w := httptest.NewRecorder()
	r := httptest.NewRequest("GET", "/v1/rules", nil)
	r.Host = "attacker.example:9464"
	g.ServeHTTP(w, r)
	if w.Code != http.StatusMisdirectedRequest || !strings.Contains(w.Body.String(), "--admin-allowed-hosts") {
		t.Errorf("refusal: %d %s", w.Code, w.Body.String())
	}
}

func TestMutationsNeedANonSimpleRequest(t *testing.T) {
	reached := false
	h := requireNonSimple(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached = true }))
	tests := []struct {
		method, contentType, header string
		ok                          bool
	}{
		{"GET", "", "", true},
		{"HEAD", "", "", true},
		{"POST", "", "", false},
		{"POST", "text/plain", "", false},
		{"POST", "application/x-www-form-urlencoded", "", false},
		{"POST", "multipart/form-data; boundary=x", "", false},
		{"POST", "application/json", "", true},
		{"POST", "application/json; charset=utf-8", "", true},
		{"POST", "text/plain", "1", true},
		{"DELETE", "", "", false},
		{"DELETE", "", "1", true},
	}
	for _, tt := range tests {
		reached = false
		w := httptest.NewRecorder()
		r := httptest.NewRequest(tt.method, "/v1/reload", nil)
		if tt.contentType != "" {
			r.Header.Set("Content-Type", tt.contentType)
		}
		if tt.header != "" {
			r.Header.Set(AdminHeader, tt.header)
		}
		h.ServeHTTP(w, r)
		if reached != tt.ok || (!tt.ok && w.Code != http.StatusForbidden) {
			t.Errorf("%s %q header %q: reached %v, code %d; want reached %v", tt.method, tt.contentType, tt.header, reached, w.Code, tt.ok)
		}
	}
}

func TestRedactKey(t *testing.T) {
	tests := []struct{ key, prefix string }{
		{"a", ""},
		{"ab", "a"},
		{"alice", "al"},
		{"sk_live_0123456789abcdef", "sk_l"},
		{"é日本語", "é"}, // cut on a rune boundary
	}
	for _, tt := range tests {
		got := redactKey(tt.key)
		if !strings.HasPrefix(got, tt.prefix+"…") || len(got) != len(tt.prefix)+len("…")+12 || (len(tt.key) > 3 && strings.Contains(got, tt.key)) {
			t.Errorf("redactKey(%q) = %q, want %q…<12 hex>", tt.key, got, tt.prefix)
		}
		if redactKey(tt.key) != got {
			t.Errorf("redactKey(%q) is not stable", tt.key)
		}
	}
	// printf %s alice | sha256sum | cut -c1-12
	if got := redactKey("alice"); got != "al…2bd806c97f0e" {
		t.Errorf("redactKey(alice) = %q", got)
	}
}

func TestCappedListenerShedsBeyondTheCap(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := newCappedListener(inner, 2)
	defer l.Close()
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	var held []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		held = append(held, <-accepted)
	}
	extra, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	buf := make([]byte, 256)
	n, _ := extra.Read(buf) // the refusal, then EOF
	if !strings.HasPrefix(string(buf[:n]), "HTTP/1.1 503") || !strings.Contains(string(buf[:n]), "too many connections") {
		t.Fatalf("connection beyond the cap read %q", buf[:n])
	}
	if l.Shed() != 1 {
		t.Fatalf("shed %d, want 1", l.Shed())
	}
	held[0].Close()
	held[0].Close() // a second Close gives back nothing more
	again, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	(<-accepted).Close()
	if l.open.Load() != 1 {
		t.Fatalf("open %d, want 1", l.open.Load())
	}
}

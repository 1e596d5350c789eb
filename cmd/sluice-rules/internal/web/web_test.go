package web

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"golang.org/x/net/html"
)

func TestHandlerServesThePageWithItsHeaders(t *testing.T) {
	h := Handler()
	tests := []struct {
		method, path string
		status       int
		contentType  string
	}{
		{"GET", "/ui/", 200, "text/html; charset=utf-8"},
		{"GET", "/ui/index.html", 200, "text/html; charset=utf-8"},
		{"HEAD", "/ui/app.js", 200, "text/javascript; charset=utf-8"},
		{"GET", "/ui/style.css", 200, "text/css; charset=utf-8"},
		{"GET", "/ui/static/app.js", 404, ""},
		{"GET", "/ui/../go.mod", 404, ""},
		{"GET", "/other", 404, ""},
		{"POST", "/ui/", 405, ""},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(tt.method, tt.path, nil))
			if rec.Code != tt.status {
				t.Fatalf("status %d, want %d", rec.Code, tt.status)
			}
			if tt.contentType != "" && rec.Header().Get("Content-Type") != tt.contentType {
				t.Errorf("Content-Type %q, want %q", rec.Header().Get("Content-Type"), tt.contentType)
			}
			// Every answer, errors too, carries the policy.
			for k, v := range map[string]string{"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff",
				"X-Frame-Options": "DENY", "Referrer-Policy": "no-referrer"} {
				if got := rec.Header().Get(k); got != v {
					t.Errorf("%s: %q, want %q", k, got, v)
				}
			}
		})
	}
}

// TestPageHasNoInlineCodeAndOnlyItsOwnFiles: the CSP forbids inline script
// and style, so the page must hold none, and every file it refers to must be
// one the handler serves.
func TestPageHasNoInlineCodeAndOnlyItsOwnFiles(t *testing.T) {
	rec := httptest.NewRecorder()
	Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/ui/", nil))
	doc, err := html.Parse(rec.Body)
	if err != nil {
		t.Fatal(err)
	}
	for n := range doc.Descendants() {
		if n.Type != html.ElementNode {
			continue
		}
		for _, a := range n.Attr {
			switch {
			case a.Key == "style" || strings.HasPrefix(a.Key, "on"):
				t.Errorf("<%s %s=...>: inline style or handler, which the CSP blocks", n.Data, a.Key)
			case a.Key == "src" || a.Key == "href":
				if _, ok := files[a.Val]; !ok || strings.Contains(a.Val, ":") {
					t.Errorf("<%s %s=%q>: not one of the page's own files", n.Data, a.Key, a.Val)
				}
			}
		}
		if (n.Data == "script" || n.Data == "style") && n.FirstChild != nil {
			t.Errorf("inline <%s>", n.Data)
		}
	}
}

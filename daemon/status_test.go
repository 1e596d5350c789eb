package daemon

import (
	"bytes"
	"net/http"
	"strings"
	"testing"
)

func TestStatusPageServed(t *testing.T) {
	d, _, _ := newDaemon(t, testRules)
	h := d.AdminHandler()

	w := get(t, h, "/")
	if w.Code != http.StatusOK || w.Header().Get("Content-Type") != "text/html; charset=utf-8" {
		t.Fatalf("GET /: %d %q", w.Code, w.Header().Get("Content-Type"))
	}
	if csp := w.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") || strings.Contains(csp, "unsafe") {
		t.Errorf("GET /: Content-Security-Policy %q, want only 'self'", csp)
	}
	page := w.Body.String()
	for _, want := range []string{`id="node"`, `id="members"`, `id="rules"`, `id="top-keys"`, `id="chart"`, `id="legend"`,
		`<script src="static/app.js" defer></script>`, `<link rel="stylesheet" href="static/style.css">`} {
		if !strings.Contains(page, want) {
			t.Errorf("GET / lacks %s", want)
		}
	}
	if strings.Count(page, "<script") != 1 || strings.Contains(page, " style=") {
		t.Error("the page has inline script or style, which its CSP refuses")
	}

	for file, ctype := range map[string]string{"app.js": "text/javascript; charset=utf-8", "style.css": "text/css; charset=utf-8"} {
		w := get(t, h, "/static/"+file)
		if w.Code != http.StatusOK || w.Header().Get("Content-Type") != ctype || w.Body.Len() == 0 {
			t.Errorf("GET /static/%s: %d %q, %d bytes", file, w.Code, w.Header().Get("Content-Type"), w.Body.Len())
		}
		if w.Header().Get("Content-Security-Policy") == "" {
			t.Errorf("GET /static/%s has no Content-Security-Policy", file)
		}
	}
	for _, path := range []string{"/static/nope.js", "/static/..%2fstatus.go", "/nope", "/index.html"} {
		if w := get(t, h, path); w.Code != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", path, w.Code)
		}
	}

	// Everything the page needs is in the binary: no CDN, no external URL.
	// Data goes into the page as text only: keys are client-controlled.
	for file, body := range map[string][]byte{"index.html": statusHTML, "app.js": statusJS, "style.css": statusCSS} {
		for _, bad := range []string{"http:", "https:", `"//`, "'//", "innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("} {
			if bytes.Contains(body, []byte(bad)) {
				t.Errorf("%s contains %q", file, bad)
			}
		}
	}
}

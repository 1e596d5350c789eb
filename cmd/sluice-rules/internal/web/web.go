// Package web is sluice-rules' web page: a team signs in with its token,
// sees its rules, edits one (validated by the service's dry run, with a
// diff preview, before saving) and sees the history, with one-step rollback.
//
// The page is three static files embedded in the binary (no external
// assets): the HTML, a script and a style sheet. Everything it shows comes
// from the JSON API (internal/rulesapi) that the script calls from the
// same origin with the token in the Authorization header; the token is never
// put in a URL. The handler serves the files with a Content-Security-Policy
// that allows only those files and same-origin API calls (no inline script
// or style, no framing, no form posts), and headers that keep browsers and
// proxies from caching or sniffing them. It is not an API: it only serves
// the files.
package web

import (
	"bytes"
	"embed"
	"io/fs"
	"net/http"
	"strings"
	"time"
)

//go:embed static
var static embed.FS

// Prefix is where the page is mounted; the handler sees paths with it.
const Prefix = "/ui/"

// CSP is the Content-Security-Policy of every answer: the page's own script
// and style, API calls to its own origin, nothing else.
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// files are the page's files by their path under Prefix ("" is the page).
var files = map[string]struct {
	name, contentType string
}{
	"":           {"static/index.html", "text/html; charset=utf-8"},
	"index.html": {"static/index.html", "text/html; charset=utf-8"},
	"app.js":     {"static/app.js", "text/javascript; charset=utf-8"},
	"style.css":  {"static/style.css", "text/css; charset=utf-8"},
}

// Handler serves the page under Prefix; any other path is 404 and any
// method but GET and HEAD is 405.
func Handler() http.Handler {
	loaded := map[string][]byte{}
	for path, f := range files {
		data, err := fs.ReadFile(static, f.name)
		if err != nil {
			panic("web: embedded file missing: " + f.name) // a build mistake, caught by the tests
		}
		loaded[path] = data
	}
	start := time.Now()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", CSP)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		h.Set("Cross-Origin-Resource-Policy", "same-origin")
		h.Set("Cache-Control", "no-cache")
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			h.Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		rest, ok := strings.CutPrefix(r.URL.Path, Prefix)
		f, known := files[rest]
		if !ok || !known {
			http.NotFound(w, r)
			return
		}
		h.Set("Content-Type", f.contentType)
		http.ServeContent(w, r, rest, start, bytes.NewReader(loaded[rest]))
	})
}

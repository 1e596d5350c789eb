package daemon

import (
	_ "embed"
	"net/http"
)

// The status page's assets, built into the binary: one HTML page, its script
// and its stylesheet. The page draws everything from the admin endpoint's
// JSON (/v1/members, /v1/rules, /v1/top, /v1/stats) and loads nothing from
// anywhere else, so it works on a host with no internet access.
var (
	//go:embed status/index.html
	statusHTML []byte
	//go:embed status/app.js
	statusJS []byte
	//go:embed status/style.css
	statusCSS []byte
)

// statusCSP lets the page load only its own assets and call only its own
// origin: no inline script or style, no frames, no forms.
const statusCSP = "default-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// statusPage serves the status page itself (mounted at exactly "/").
func statusPage() http.Handler { return statusFile(statusHTML, "text/html; charset=utf-8") }

// statusAssets serves the page's script and stylesheet as /static/{file}.
func statusAssets() http.Handler {
	js := statusFile(statusJS, "text/javascript; charset=utf-8")
	css := statusFile(statusCSS, "text/css; charset=utf-8")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.PathValue("file") {
		case "app.js":
			js.ServeHTTP(w, r)
		case "style.css":
			css.ServeHTTP(w, r)
		default:
			http.NotFound(w, r)
		}
	})
}

func statusFile(body []byte, contentType string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Type", contentType)
		h.Set("Content-Security-Policy", statusCSP)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Cache-Control", "no-cache") // a restarted daemon may bring a new page
		w.Write(body)
	})
}

package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/pprof"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluicelabs/sluice/daemon/adminapi"
)

// AdminHandler serves the daemon's operator endpoints:
//
//	GET  /                     the status page (members, rules, busiest keys, live decision rates)
//	GET  /static/{file}        the status page's script and stylesheet
//	GET  /healthz              liveness
//	GET  /readyz               readiness, with the rules in force and reload results
//	GET  /metrics              Prometheus
//	GET  /v1/rules             the rules in force
//	GET  /v1/members           the cluster as this node sees it, rules drift flagged
//	GET  /v1/keys/{rule}/{key} one key: balance, debt, per-origin counters
//	GET  /v1/top?n=N           the N keys deepest into their burst (keys redacted
//	                           unless Settings.AdminShowKeys)
//	GET  /v1/stats             decisions so far, per rule and outcome
//	POST /v1/reload            re-read the rules (file or URL) now
//	DELETE /v1/keys/{rule}/{key} clear the key's debt, cluster-wide (see ResetKey)
//	/debug/pprof/              Go profiles, only with Settings.Pprof
//
// Requests that change state (POST, DELETE) must carry the AdminHeader
// header or a JSON body (see requireNonSimple). The handler does not check
// the Host header: Run serves it behind a check for its bound address.
func (d *Daemon) AdminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /{$}", statusPage())
	mux.Handle("GET /static/{file}", statusAssets())
	d.probes(mux)
	mux.HandleFunc("GET /v1/rules", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, d.RulesView()) })
	mux.HandleFunc("GET /v1/members", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, d.MembersView()) })
	mux.HandleFunc("GET /v1/keys/{rule}/{key}", func(w http.ResponseWriter, r *http.Request) {
		kv, ok := d.KeyView(r.PathValue("rule"), r.PathValue("key"))
		if !ok {
			writeJSONStatus(w, http.StatusNotFound, map[string]string{"error": "no such rule: " + r.PathValue("rule")})
			return
		}
		writeJSON(w, kv)
	})
	mux.HandleFunc("DELETE /v1/keys/{rule}/{key}", d.serveReset)
	mux.HandleFunc("GET /v1/top", func(w http.ResponseWriter, r *http.Request) {
		n := 10
		if q := r.URL.Query().Get("n"); q != "" {
			v, err := strconv.Atoi(q)
			if err != nil || v < 1 || v > maxTop {
				writeJSONStatus(w, http.StatusBadRequest, map[string]string{"error": fmt.Sprintf("n must be a number in [1, %d]", maxTop)})
				return
			}
			n = v
		}
		writeJSON(w, map[string]any{"keys": d.busiestShown(n)})
	})
	mux.HandleFunc("GET /v1/stats", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, d.StatsView()) })
	mux.HandleFunc("POST /v1/reload", func(w http.ResponseWriter, r *http.Request) {
		err := d.Reload()
		out := map[string]any{"ok": err == nil, "rules_hash": d.Rules().Hash, "rules_source": d.Rules().Source}
		if err != nil {
			out["error"] = err.Error()
			writeJSONStatus(w, http.StatusUnprocessableEntity, out)
			return
		}
		writeJSON(w, out)
	})
	if d.settings.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return requireNonSimple(mux)
}

// MetricsHandler serves what may be scraped from a wider network than the
// admin API: /metrics, /healthz and /readyz, nothing else (no keys, no rules,
// no mutation).
func (d *Daemon) MetricsHandler() http.Handler {
	mux := http.NewServeMux()
	d.probes(mux)
	return mux
}

// probes mounts /healthz, /readyz and /metrics.
func (d *Daemon) probes(mux *http.ServeMux) {
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok\n")) })
	mux.HandleFunc("GET /readyz", d.serveReady)
	mux.Handle("GET /metrics", promhttp.HandlerFor(d.metrics.reg, promhttp.HandlerOpts{}))
}

// serveReset is DELETE /v1/keys/{rule}/{key}.
func (d *Daemon) serveReset(w http.ResponseWriter, r *http.Request) {
	v, err := d.ResetKey(r.PathValue("rule"), r.PathValue("key"))
	switch {
	case errors.Is(err, ErrUnknownRule):
		writeJSONStatus(w, http.StatusNotFound, map[string]string{"error": "no such rule: " + r.PathValue("rule")})
	case errors.Is(err, ErrBadKey):
		writeJSONStatus(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
	case err != nil:
		writeJSONStatus(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
	default:
		writeJSON(w, v)
	}
}

// busiestShown is Busiest with keys redacted unless Settings.AdminShowKeys.
func (d *Daemon) busiestShown(n int) []adminapi.BusyKey {
	top := d.Busiest(n)
	if !d.settings.AdminShowKeys {
		for i := range top {
			top[i].Key, top[i].Redacted = redactKey(top[i].Key), true
		}
	}
	return top
}

func (d *Daemon) serveReady(w http.ResponseWriter, r *http.Request) {
	ready := false
	select {
	case <-d.ready:
		ready = true
	default:
	}
	ok, failed := d.ReloadCounts()
	body := map[string]any{"ready": ready, "rules_source": d.Rules().Source, "rules_hash": d.Rules().Hash,
		"reloads_ok": ok, "reloads_failed": failed}
	if e := d.lastReloadError.Load(); e != nil {
		body["last_reload_error"] = *e
	}
	if d.fetcher != nil {
		body["rules_url"] = d.settings.RulesURL
		body["rules_url_reachable"] = !d.fetchFailing.Load()
		if at := d.lastFetchOK.Load(); at != 0 {
			body["rules_url_last_answer"] = time.Unix(at, 0).UTC().Format(time.RFC3339)
		}
		if e := d.lastFetchError.Load(); e != nil {
			body["rules_url_error"] = *e
		}
		d.fallbackView(body)
	}
	d.gossipSecurityView(body)
	if !ready {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	writeJSON(w, body)
}

// maxTop caps /v1/top's n.
const maxTop = 1000

func writeJSON(w http.ResponseWriter, v any) { writeJSONStatus(w, http.StatusOK, v) }

func writeJSONStatus(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

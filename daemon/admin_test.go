package daemon

import (
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/sluicelabs/sluice/bucket"
	"github.com/sluicelabs/sluice/config"
	"github.com/sluicelabs/sluice/daemon/adminapi"
	"github.com/sluicelabs/sluice/ipc"
)

func get(t *testing.T, h http.Handler, path string) *httptest.ResponseRecorder {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", path, nil))
	return w
}

func counter(t *testing.T, families map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	t.Helper()
	f, ok := families[name]
	if !ok {
		t.Fatalf("metric %s not exported", name)
	}
next:
	for _, m := range f.GetMetric() {
		for _, l := range m.GetLabel() {
			if want, ok := labels[l.GetName()]; ok && want != l.GetValue() {
				continue next
			}
		}
		if m.GetCounter() != nil {
			return m.GetCounter().GetValue()
		}
		return m.GetGauge().GetValue()
	}
	t.Fatalf("no %s series with %v", name, labels)
	return 0
}

func TestAdminEndpoints(t *testing.T) {
	d, _, path := newDaemon(t, testRules)
	h := d.AdminHandler()
	if w := get(t, h, "/healthz"); w.Code != 200 {
		t.Fatalf("/healthz %d", w.Code)
	}
	if w := get(t, h, "/readyz"); w.Code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz before serving: %d", w.Code)
	}
	for range 5 {
		decide(t, d, checks("four", "k"))
	}
	decide(t, d, checks("user", "a", "route", "/x"))
	decide(t, d, checks("user", "b", "route", "/x"))
	decide(t, d, checks("user", "c", "route", "/x")) // route (2/s) refuses: user counts as throttled too

	writeRules(t, path, "rules: [")
	d.Reload()

	w := get(t, h, "/metrics")
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(w.Body.String()))
	if err != nil {
		t.Fatalf("parse /metrics: %v\n%s", err, w.Body.String())
	}
	for _, c := range []struct {
		rule, outcome string
		want          float64
	}{{"four", "admitted", 4}, {"four", "throttled", 1}, {"user", "admitted", 2}, {"user", "throttled", 1}, {"route", "throttled", 1}} {
		if got := counter(t, families, "sluice_decisions_total", map[string]string{"rule": c.rule, "outcome": c.outcome}); got != c.want {
			t.Errorf("decisions{rule=%s,outcome=%s} = %v, want %v", c.rule, c.outcome, got, c.want)
		}
	}
	if got := counter(t, families, "sluice_rules_reloads_total", map[string]string{"result": "error"}); got != 1 {
		t.Errorf("failed reloads = %v", got)
	}
	if got := counter(t, families, "sluice_active_keys", nil); got < 4 {
		t.Errorf("active keys = %v", got)
	}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "key" {
					t.Fatalf("%s has a per-key label: cardinality must stay bounded", f.GetName())
				}
			}
		}
	}

	var ready map[string]any
	json.Unmarshal(get(t, h, "/readyz").Body.Bytes(), &ready)
	if msg, _ := ready["last_reload_error"].(string); !strings.Contains(msg, "rules.yaml") {
		t.Errorf("/readyz does not explain the failed reload: %v", ready)
	}
	if w := get(t, h, "/v1/rules"); !strings.Contains(w.Body.String(), `"name": "four"`) {
		t.Errorf("/v1/rules: %s", w.Body.String())
	}
	var key map[string]any
	json.Unmarshal(get(t, h, "/v1/keys/four/k").Body.Bytes(), &key)
	if key["balance"] != 0.0 || key["limit"] != 4.0 {
		t.Errorf("/v1/keys/four/k: %v", key)
	}
	if w := get(t, h, "/v1/keys/nope/k"); w.Code != 404 {
		t.Errorf("unknown rule: %d", w.Code)
	}
}

func TestDecideWithMetricsAllocatesNothing(t *testing.T) {
	TestDecideAllocatesNothing(t) // the counters are resolved per rule, not per request
}

func TestAdminOperatorViews(t *testing.T) {
	d, clock, path := newDaemon(t, testRules)
	h := d.AdminHandler()
	for range 6 {
		decide(t, d, checks("four", "hot")) // 4 admitted, 2 throttled: empty
	}
	decide(t, d, checks("four", "warm"))
	decide(t, d, checks("user", "u1"))

	var top struct{ Keys []adminapi.BusyKey }
	if err := json.Unmarshal(get(t, h, "/v1/top?n=2").Body.Bytes(), &top); err != nil {
		t.Fatal(err)
	}
	if len(top.Keys) != 2 || top.Keys[0].Key != redactKey("hot") || top.Keys[0].Used != 1 || top.Keys[1].Key != redactKey("warm") ||
		!top.Keys[0].Redacted {
		t.Errorf("/v1/top?n=2 = %+v, want hot (all spent) then warm, redacted", top.Keys)
	}
	for _, bad := range []string{"0", "x", "100000"} {
		if w := get(t, h, "/v1/top?n="+bad); w.Code != http.StatusBadRequest {
			t.Errorf("/v1/top?n=%s: %d", bad, w.Code)
		}
	}

	var stats adminapi.StatsView
	json.Unmarshal(get(t, h, "/v1/stats").Body.Bytes(), &stats)
	if got := stats.Rules["four"]; got.Admitted != 5 || got.Throttled != 2 {
		t.Errorf("/v1/stats four = %+v, want 5 admitted, 2 throttled", got)
	}

	var members adminapi.MembersView
	json.Unmarshal(get(t, h, "/v1/members").Body.Bytes(), &members)
	if members.Clustered || members.Drift || len(members.Members) != 1 || !members.Members[0].Self ||
		members.Members[0].RulesHash != d.Rules().Hash {
		t.Errorf("/v1/members of a single daemon: %+v", members)
	}

	var key adminapi.KeyView
	json.Unmarshal(get(t, h, "/v1/keys/four/hot").Body.Bytes(), &key)
	if !key.Held || key.Debt != 0 || key.Balance != 0 || key.Burst != 4 {
		t.Errorf("/v1/keys/four/hot: %+v", key)
	}
	clock.Advance(time.Second)
	json.Unmarshal(get(t, h, "/v1/keys/four/hot").Body.Bytes(), &key)
	if key.Balance != 4 {
		t.Errorf("after a second the balance is %v, want 4", key.Balance)
	}

	post := func() *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		r := httptest.NewRequest("POST", "/v1/reload", nil)
		r.Header.Set(AdminHeader, "1")
		h.ServeHTTP(w, r)
		return w
	}
	writeRules(t, path, strings.Replace(testRules, "4/1s", "8/1s", 1))
	if w := post(); w.Code != 200 || d.Rules().ByName["four"].Limits[0].Count() != 8 {
		t.Errorf("POST /v1/reload: %d %s", w.Code, w.Body.String())
	}
	writeRules(t, path, "rules: {four: {rate: 0/1s}}")
	if w := post(); w.Code != http.StatusUnprocessableEntity || !strings.Contains(w.Body.String(), "rules.yaml:1") {
		t.Errorf("POST /v1/reload of a bad file: %d %s", w.Code, w.Body.String())
	}
	if d.Rules().ByName["four"].Limits[0].Count() != 8 {
		t.Error("a bad reload changed the rules")
	}
	if w := get(t, h, "/debug/pprof/"); w.Code != http.StatusNotFound {
		t.Errorf("pprof served without being asked for: %d", w.Code)
	}
}

func TestOvershootClientReportsAndLatencyMetrics(t *testing.T) {
	d, _, _ := newDaemon(t, testRules)
	for range 2 {
		decide(t, d, checks("four", "k")) // 2 of 4 left
	}
	peer := ledger{d}
	peer.Charge("four", "k", 0, 1) // covered: 1 left
	peer.Charge("four", "k", 0, 3) // 2 of these 3 land below zero
	peer.Charge("four", "k", 0, 2) // all below zero
	peer.Charge("four", "other", 0, 4)
	d.ClientReport("svc", ipc.Report{FailedOpen: 9, FailedClosed: 1})
	for range 2000 {
		decide(t, d, checks("user", "u"))
	}

	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(get(t, d.AdminHandler(), "/metrics").Body.String()))
	if err != nil {
		t.Fatal(err)
	}
	if got := counter(t, families, "sluice_cluster_overshoot_tokens_total", map[string]string{"rule": "four"}); got != 4 {
		t.Errorf("overshoot of rule four = %v, want 4", got)
	}
	if got := counter(t, families, "sluice_client_failed_open_total", nil); got != 9 {
		t.Errorf("client failed open = %v, want 9", got)
	}
	if got := counter(t, families, "sluice_client_failed_closed_total", nil); got != 1 {
		t.Errorf("client failed closed = %v, want 1", got)
	}
	h := families["sluice_decision_duration_seconds"].GetMetric()[0].GetHistogram()
	// Sampled one in 64: 2000 decisions leave none timed with probability (63/64)^2000 < 1e-13.
	if h.GetSampleCount() == 0 || h.GetSampleCount() > 2000/8 || h.GetSampleSum() <= 0 {
		t.Errorf("decision latency histogram: %d samples, sum %v", h.GetSampleCount(), h.GetSampleSum())
	}
}

func TestPprofOnlyWhenAskedFor(t *testing.T) {
	s := config.DefaultSettings()
	s.SocketPath, s.Pprof = filepath.Join(t.TempDir(), "d.sock"), true
	d, err := New(Config{Settings: s})
	if err != nil {
		t.Fatal(err)
	}
	if w := get(t, d.AdminHandler(), "/debug/pprof/goroutine?debug=1"); w.Code != 200 || !strings.Contains(w.Body.String(), "goroutine profile") {
		t.Errorf("pprof with --pprof: %d %.80s", w.Code, w.Body.String())
	}
}

// A peer (one that holds the gossip key, so it is trusted) reporting an
// absurd counter cannot overflow anything: the charge is capped at MaxCost
// tokens, the balance stays finite, other keys are untouched, and the
// daemon goes on deciding.
func TestAbsurdPeerCountersAreBounded(t *testing.T) {
	d, _, _ := newDaemon(t, testRules)
	peer := ledger{d}
	peer.Charge("four", "victim", 0, math.MaxUint64)
	peer.Charge("four", "victim", 0, math.MaxUint64)
	b, _ := d.Balance("four", "victim")
	if math.IsNaN(b) || math.IsInf(b, 0) || b < -2*float64(bucket.MaxCost)-4 || b > -float64(bucket.MaxCost) {
		t.Fatalf("balance after two absurd charges: %v", b)
	}
	if ok, _ := decide(t, d, checks("four", "victim")); ok {
		t.Fatal("the victim key was admitted")
	}
	if ok, r := decide(t, d, checks("four", "bystander")); !ok || r[0].Remaining != 3 {
		t.Fatalf("another key was affected: %+v", r)
	}
}

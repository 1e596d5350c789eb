package daemon

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/sluicelabs/sluice/ipc"
)

// TestStatusPageInChromium loads the status page in headless Chromium from
// a daemon that is deciding traffic, lets the page's script poll for five
// seconds of the browser's virtual time, and checks what the page then shows.
//
// The traffic is tied to the page's polls, so the outcome does not depend on
// timing: before each /v1/stats answer the test moves the daemon's clock one
// second and decides six requests on one key of the 4/1s rule (4 admitted, 2
// throttled), and the handler serves one request at a time so that every view
// sees whole seconds.
func TestStatusPageInChromium(t *testing.T) {
	browser := findChromium(t)
	d, clock, _ := newDaemon(t, testRules)
	d.settings.AdminShowKeys = true   // keys shown raw, so that the page's escaping of them is tested
	const busy = `<i>hot</i> & "key"` // client-controlled: it must show as text
	for range 6 {
		decide(t, d, checks("four", busy))
	}
	decide(t, d, checks("user", "u1"))

	admin := d.AdminHandler()
	var (
		mu      sync.Mutex
		results = make([]ipc.Result, 1)
		polls   int
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if r.URL.Path == "/v1/stats" {
			polls++
			clock.Advance(time.Second)
			for range 6 {
				if _, err := d.Decide(checks("four", busy), results); err != nil {
					t.Errorf("decide: %v", err)
				}
			}
		}
		admin.ServeHTTP(w, r)
	}))
	defer srv.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--disable-background-networking", "--disable-extensions", "--no-first-run", "--user-data-dir="+t.TempDir(),
		"--virtual-time-budget=5000", "--dump-dom", srv.URL+"/")
	var dom, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &dom, &stderr
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v\n%s", browser, err, stderr.String())
	}
	mu.Lock()
	t.Logf("%s ran for %v; the page polled /v1/stats %d times", browser, time.Since(start).Round(time.Millisecond), polls)
	mu.Unlock()
	doc, err := html.Parse(&dom)
	if err != nil {
		t.Fatalf("parse the dumped DOM: %v", err)
	}
	page := pageDOM{t: t, doc: doc}

	if msg := page.text(page.byID("error")); msg != "" {
		t.Errorf("the page reports an error: %s", msg)
	}
	node := d.settings.NodeName
	if got := page.text(page.byID("node")); got != node {
		t.Errorf("node shown as %q, want %q", got, node)
	}
	if m := page.find(page.byID("members"), "tr", "data-member", node); m == nil || !strings.Contains(page.text(m), "(this node)") {
		t.Errorf("members table does not list %s as this node", node)
	}
	for _, rule := range []string{"four", "route", "user"} {
		if r := page.find(page.byID("rules"), "tr", "data-rule", rule); r == nil || page.text(r.FirstChild) != rule || !strings.Contains(page.text(r), "token_bucket") {
			t.Errorf("rules table does not list %s with its algorithm", rule)
		}
	}
	top := page.byID("top-keys")
	if k := page.find(top, "tr", "data-rule", "four", "data-key", busy); page.text(page.find(k, "td", "class", "key")) != busy || !strings.Contains(page.text(k), "100%") {
		t.Errorf("busiest keys do not show %q with its burst spent:\n%s", busy, page.text(top))
	}
	if page.find(top, "i") != nil {
		t.Error("a key was inserted as HTML")
	}

	chart := page.byID("chart")
	if n := page.intAttr(chart, "data-points"); n < 1 {
		t.Fatalf("chart has %d points after %d polls", n, polls)
	}
	for _, outcome := range []string{"admitted", "throttled"} {
		line := page.find(chart, "polyline", "data-rule", "four", "data-outcome", outcome)
		if page.intAttr(line, "data-points") < 1 || page.attr(line, "points") == "" {
			t.Errorf("chart has no %s series for four", outcome)
		}
	}
	legend := page.find(page.byID("legend"), "li", "data-rule", "four")
	if legend == nil {
		t.Fatal("the legend has no entry for four")
	}
	for attr, least := range map[string]float64{"data-admitted-rate": 1, "data-throttled-rate": 1, "data-admitted-total": 8, "data-throttled-total": 4} {
		if v, _ := strconv.ParseFloat(page.attr(legend, attr), 64); v < least {
			t.Errorf("legend for four: %s=%q, want at least %v (%s)", attr, page.attr(legend, attr), least, page.text(legend))
		}
	}
}

// findChromium returns a Chromium or Chrome on PATH, or skips the test;
// with SLUICE_REQUIRE_CHROMIUM set (as CI sets it) it fails instead.
func findChromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	const why = "no chromium, chromium-browser or google-chrome on PATH: the status page's browser test needs one (apt-get install chromium)"
	if os.Getenv("SLUICE_REQUIRE_CHROMIUM") != "" {
		t.Fatal(why + "; SLUICE_REQUIRE_CHROMIUM is set")
	}
	t.Skip(why)
	return ""
}

// pageDOM reads a parsed page: a nil node (not found) reads as empty.
type pageDOM struct {
	t   *testing.T
	doc *html.Node
}

func (p pageDOM) findAll(n *html.Node, tag string) []*html.Node {
	var out []*html.Node
	if n == nil {
		return nil
	}
	for c := range n.Descendants() {
		if c.Type == html.ElementNode && c.Data == tag {
			out = append(out, c)
		}
	}
	return out
}

// find returns the first tag under n that has the attributes given as
// key, value pairs.
func (p pageDOM) find(n *html.Node, tag string, attrs ...string) *html.Node {
next:
	for _, c := range p.findAll(n, tag) {
		for i := 0; i+1 < len(attrs); i += 2 {
			if p.attr(c, attrs[i]) != attrs[i+1] {
				continue next
			}
		}
		return c
	}
	return nil
}

func (p pageDOM) byID(id string) *html.Node {
	for c := range p.doc.Descendants() {
		if c.Type == html.ElementNode && p.attr(c, "id") == id {
			return c
		}
	}
	p.t.Errorf("the page has no element with id %q", id)
	return nil
}

func (p pageDOM) attr(n *html.Node, key string) string {
	if n == nil {
		return ""
	}
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}

func (p pageDOM) intAttr(n *html.Node, key string) int {
	v, _ := strconv.Atoi(p.attr(n, key))
	return v
}

func (p pageDOM) text(n *html.Node) string {
	if n == nil {
		return ""
	}
	var b strings.Builder
	for c := range n.Descendants() {
		if c.Type == html.TextNode {
			b.WriteString(c.Data)
		}
	}
	return strings.TrimSpace(b.String())
}

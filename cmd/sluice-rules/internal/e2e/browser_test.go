package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// findChromium returns a Chromium or Chrome on PATH, or skips the test;
// with SLUICE_REQUIRE_CHROMIUM set (as CI sets it) it fails instead.
func findChromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	const why = "no chromium, chromium-browser or google-chrome on PATH: the web page's browser tests need one (apt-get install chromium)"
	if os.Getenv("SLUICE_REQUIRE_CHROMIUM") != "" {
		t.Fatal(why + "; SLUICE_REQUIRE_CHROMIUM is set")
	}
	t.Skip(why)
	return ""
}

// stepTimeout bounds one browser step: generous, for a loaded machine.
const stepTimeout = 60 * time.Second

// browser is a headless Chromium tab driven over the DevTools protocol.
// It records the page's uncaught exceptions and Content-Security-Policy
// violations, which the tests require to be none.
type browser struct {
	t   *testing.T
	ctx context.Context

	mu         sync.Mutex
	exceptions []string
}

// newBrowser starts Chromium; it is stopped when the test ends.
func newBrowser(t *testing.T) *browser {
	t.Helper()
	path := findChromium(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1200, 1000))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	b := &browser{t: t, ctx: ctx}
	// Start the browser (Run's first call must have no deadline) and, in
	// every document the tab loads, record CSP violations before the page's
	// own script runs.
	const cspProbe = `window.__csp = []; document.addEventListener('securitypolicyviolation', e => window.__csp.push(e.violatedDirective + ' ' + e.blockedURI));`
	err := chromedp.Do(ctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: cspProbe})
		return err
	}))
	if err != nil {
		t.Fatalf("start %s: %v", path, err)
	}
	exceptions := chromedp.Events(ctx, runtime.ExceptionThrown)
	go func() {
		for ev, err := range exceptions {
			if err != nil {
				return
			}
			b.mu.Lock()
			b.exceptions = append(b.exceptions, (&chromedp.ExceptionError{ExceptionDetails: ev.ExceptionDetails}).Error())
			b.mu.Unlock()
		}
	}()
	return b
}

// do runs steps, failing the test on an error.
func (b *browser) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, stepTimeout)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		b.t.Fatalf("browser: %s: %v\n%s", what, err, b.pageState())
	}
}

// eval evaluates a JavaScript expression that returns a string.
func (b *browser) eval(expr string) string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, stepTimeout)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[string](expr))
	if err != nil {
		b.t.Fatalf("browser: evaluate %s: %v", expr, err)
	}
	return v
}

// waitFor waits until a JavaScript expression is true.
func (b *browser) waitFor(what, expr string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, stepTimeout+5*time.Second)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(stepTimeout))); err != nil {
		b.t.Fatalf("browser: waiting until %s: %v\n%s", what, err, b.pageState())
	}
}

// text is the text of the first element matching a CSS selector ("" if none).
func (b *browser) text(sel string) string {
	b.t.Helper()
	return b.eval(fmt.Sprintf(`(document.querySelector(%s) || {textContent: ''}).textContent`, strconv.Quote(sel)))
}

// count is how many elements match a CSS selector.
func (b *browser) count(sel string) int {
	b.t.Helper()
	n, err := strconv.Atoi(b.eval(fmt.Sprintf(`String(document.querySelectorAll(%s).length)`, strconv.Quote(sel))))
	if err != nil {
		b.t.Fatal(err)
	}
	return n
}

// pageState is what the page shows of errors, for failure messages.
func (b *browser) pageState() string {
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	v, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`'error: ' + (document.getElementById('error') || {}).textContent + '\nnotice: ' + (document.getElementById('notice') || {}).textContent + '\nproblems: ' + (document.getElementById('problems') || {}).textContent + '\nurl: ' + location.href`))
	b.mu.Lock()
	defer b.mu.Unlock()
	return v + "\nexceptions: " + strings.Join(b.exceptions, "\n")
}

// clean fails the test if the page threw or the browser blocked anything
// under the page's CSP.
func (b *browser) clean() {
	b.t.Helper()
	if v := b.eval(`JSON.stringify(window.__csp || ['the CSP probe did not run'])`); v != "[]" {
		b.t.Errorf("Content-Security-Policy violations: %s", v)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.exceptions) > 0 {
		b.t.Errorf("the page threw: %s", strings.Join(b.exceptions, "\n"))
	}
}

// The page's steps, as a user takes them.

// signIn loads the page and signs in with token.
func (b *browser) signIn(base, token string) {
	b.t.Helper()
	b.do("load the page", chromedp.Navigate(base+"/ui/"), chromedp.WaitVisible(chromedp.CSS("#token")))
	b.do("sign in", chromedp.SendKeys(chromedp.CSS("#token"), token), chromedp.Click(chromedp.CSS("#signin-button")))
	b.waitFor("the team's rules show", `!document.getElementById('team').hidden && document.getElementById('team-version').textContent !== ''`)
	if loc := b.eval(`location.href`); strings.Contains(loc, token) || strings.Contains(loc, "slr_") {
		b.t.Errorf("the token is in the URL: %s", loc)
	}
	if v := b.eval(`document.getElementById('token').value`); v != "" {
		b.t.Errorf("the token field still holds the token after sign-in")
	}
}

// openRule opens the editor on a rule.
func (b *browser) openRule(rule string) {
	b.t.Helper()
	b.do("open "+rule, chromedp.Click(chromedp.CSS(fmt.Sprintf(`button.edit[data-rule=%q]`, rule))))
	b.waitFor("the editor shows "+rule, fmt.Sprintf(`!document.getElementById('editor').hidden && document.getElementById('edit-name').value === %q`, rule))
}

// checkSpec puts spec in the editor and asks for a check: it returns once
// the page shows problems or a preview.
func (b *browser) checkSpec(spec string) {
	b.t.Helper()
	b.do("edit the spec", chromedp.SetValue(chromedp.CSS("#edit-spec"), spec), chromedp.Click(chromedp.CSS("#check")))
	b.waitFor("the check's outcome shows", `document.querySelectorAll('#problems li').length > 0 || !document.getElementById('preview').hidden || document.getElementById('error').textContent !== ''`)
}

// save saves what was previewed and waits for the page to say so.
func (b *browser) save() string {
	b.t.Helper()
	b.do("save", chromedp.Click(chromedp.CSS("#save")))
	b.waitFor("the page says it saved", `document.getElementById('notice').textContent.startsWith('Saved') || document.getElementById('error').textContent !== ''`)
	if e := b.text("#error"); e != "" {
		b.t.Fatalf("saving failed: %s", e)
	}
	return b.text("#notice")
}

// Short forms of the steps the tests take.
func navigate(url string) chromedp.Action[chromedp.Void] { return chromedp.Navigate(url) }
func clickCSS(sel string) chromedp.Action[chromedp.Void] { return chromedp.Click(chromedp.CSS(sel)) }
func waitVisibleCSS(sel string) chromedp.Action[chromedp.Void] {
	return chromedp.WaitVisible(chromedp.CSS(sel))
}
func sendKeysCSS(sel, keys string) chromedp.Action[chromedp.Void] {
	return chromedp.SendKeys(chromedp.CSS(sel), keys)
}

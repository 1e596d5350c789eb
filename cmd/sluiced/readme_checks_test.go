package main

// The checks of the README blocks marked "run NAME" (readme_test.go).

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The quick start's checks, against a daemon on the embedded default rules.
func readmeCLICheck(t *testing.T, e *readmeEnv, b readmeBlock) {
	_, sock := startReadmeDaemon(t, e)
	env := readmeBinEnv(e, "SLUICE_SOCKET="+sock)
	for _, c := range readmeCommands(b.Body) {
		out, err := readmeShell(e.dir, env, c)
		if err != nil {
			t.Errorf("%s: %s: %v (exit 0 is admitted)\n%s", b, c, err, out)
		}
		t.Logf("%s\n%s", c, out)
	}
}

// The admin commands, against a daemon with its admin endpoint; a command
// the README says runs until Ctrl-C is interrupted after two lines.
func readmeCLIAdmin(t *testing.T, e *readmeEnv, b readmeBlock) {
	admin := "127.0.0.1:" + freePort(t)
	_, sock := startReadmeDaemon(t, e, "--admin-addr", admin)
	env := readmeBinEnv(e, "SLUICE_SOCKET="+sock, "SLUICE_ADMIN="+admin)
	for _, c := range readmeCommands(b.Body) {
		interrupt := strings.Contains(c, "Ctrl-C stops")
		if !interrupt {
			out, err := readmeShell(e.dir, env, c)
			if err != nil {
				t.Errorf("%s: %s: %v\n%s", b, c, err, out)
			}
			t.Logf("%s\n%s", c, out)
			continue
		}
		cmd := exec.Command("bash", "-c", "exec "+c)
		cmd.Dir, cmd.Env = e.dir, env
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := make(chan string, 64)
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		var got []string
		deadline := time.After(15 * time.Second)
		for len(got) < 2 {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("%s: %s ended after %q", b, c, got)
				}
				got = append(got, l)
			case <-deadline:
				cmd.Process.Kill()
				t.Fatalf("%s: %s printed %q in 15 s, want two polls", b, c, got)
			}
		}
		cmd.Process.Signal(syscall.SIGINT)
		done := make(chan error, 1)
		go func() {
			for range lines {
			}
			done <- cmd.Wait()
		}()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			cmd.Process.Kill()
			t.Fatalf("%s: %s did not stop on Ctrl-C (SIGINT)", b, c)
		}
		if !strings.Contains(got[0], "balance") {
			t.Errorf("%s: %s printed %q, want a balance per poll", b, c, got)
		}
	}
}

// readmeGoDrivers are test files put beside the README's Go programs: they
// drive the program's own functions against the daemon in $SLUICE_SOCKET.
var readmeGoDrivers = map[string]string{
	"go-service": `package main

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/clientlib"
)

func TestReadmeService(t *testing.T) {
	t.Parallel()
	// The program's client, with a deadline a loaded test machine meets:
	// what is tested here is the handler, not the 5 ms default.
	limiter.Close()
	limiter = clientlib.New(clientlib.Options{Timeout: 10 * time.Second})
	defer limiter.Close()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(15 * time.Second)
	for !limiter.Up() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatal("the client did not connect within 15 s")
		}
	}
	post := func(user string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("POST", "/upload", nil)
		if user != "" {
			r.Header.Set("X-User", user)
		}
		w := httptest.NewRecorder()
		upload(w, r)
		return w
	}
	if w := post("alice"); w.Code != http.StatusOK || w.Body.String() != "uploaded\n" {
		t.Fatalf("first upload: %d %q, want 200 uploaded", w.Code, w.Body.String())
	}
	if w := post("alice"); w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "60" {
		t.Fatalf("second upload: %d Retry-After %q, want 429 with Retry-After: 60", w.Code, w.Header().Get("Retry-After"))
	}
	if w := post(""); w.Code != http.StatusTooManyRequests {
		t.Fatalf("upload without X-User: %d, want 429 (an invalid check is denied)", w.Code)
	}
	if st := limiter.Stats(); st.FailedOpen != 0 {
		t.Fatalf("calls failed open: %+v", st)
	}
}
`,
	"go-middleware": `package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/clientlib"
)

func TestReadmeMiddleware(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	// A deadline a loaded test machine meets (the program's is the 5 ms default).
	c, err := clientlib.Dial(ctx, clientlib.Options{SocketPath: os.Getenv("SLUICE_SOCKET"), Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	h, err := limited(c, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok\n")) }))
	if err != nil {
		t.Fatal(err)
	}
	do := func(method, path, key string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, path, nil)
		r.Header.Set("X-API-Key", key)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	if w := do("GET", "/items", "key-1"); w.Code != 200 || w.Header().Get("X-Ratelimit-Limit") != "100" {
		t.Fatalf("GET under the default limit: %d, headers %v", w.Code, w.Header())
	}
	if w := do("POST", "/upload", "key-1"); w.Code != 200 {
		t.Fatalf("first upload: %d %s", w.Code, w.Body)
	}
	// uploads is per route: another client finds it spent.
	if w := do("POST", "/upload", "key-2"); w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") == "" {
		t.Fatalf("second upload: %d, headers %v; want 429 with Retry-After", w.Code, w.Header())
	}
}
`,
}

// The Go service, driven through its handler against a daemon on the
// README's rules.
func readmeGoService(t *testing.T, e *readmeEnv, b readmeBlock) {
	_, sock := startReadmeDaemon(t, e, "--rules", "rules.yaml")
	readmeGoTest(t, e, "go-service", sock)
	if !strings.Contains(e.readme, "`429 rate limited` with `Retry-After: 60`") {
		t.Errorf("%s: the README no longer says what the driver checks (429 with Retry-After: 60)", b)
	}
}

// The module commands ran when the Go blocks were built (readmeGoBuild).
func readmeGoModule(t *testing.T, e *readmeEnv, b readmeBlock) {
	if _, err := os.Stat(filepath.Join(e.gomod, "myservice")); err != nil {
		t.Errorf("%s: go build . made no myservice binary: %v", b, err)
	}
}

func readmeGoMiddleware(t *testing.T, e *readmeEnv, b readmeBlock) {
	_, sock := startReadmeDaemon(t, e, "--rules", "rules.yaml")
	readmeGoTest(t, e, "go-middleware", sock)
}

// readmeGoTest runs the driver test beside one README program.
func readmeGoTest(t *testing.T, e *readmeEnv, name, sock string) {
	t.Helper()
	cmd := exec.Command("go", "test", "-count=1", "-timeout=2m", "./"+e.goDirs[name])
	cmd.Dir = e.gomod
	cmd.Env = append(readmeGoEnv(), "SLUICE_SOCKET="+sock)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the README's %s program against sluiced: %v\n%s", name, err, out)
	}
}

// The embedded limiter, run as the README says (next to rules.yaml); it
// prints what the README says it prints.
func readmeGoEmbedded(t *testing.T, e *readmeEnv, b readmeBlock) {
	exe := filepath.Join(tempDir(t), "embedded")
	build := exec.Command("go", "build", "-o", exe, "./"+e.goDirs["go-embedded"])
	build.Dir, build.Env = e.gomod, readmeGoEnv()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", b, err, out)
	}
	run := exec.Command(exe)
	run.Dir, run.Env = e.dir, readmeBinEnv(e)
	out, err := run.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", b, err, out)
	}
	got := strings.TrimSpace(string(out))
	if !strings.Contains(e.readme, "it prints `"+got+"`") {
		t.Errorf("%s printed %q; the README says otherwise", b, got)
	}
}

// readmePython runs a Python driver that executes the block at path BLOCK,
// with the Python client on its path, against a daemon on the README's
// rules, and returns what it printed.
func readmePython(t *testing.T, e *readmeEnv, b readmeBlock, driver string) string {
	t.Helper()
	py := pythonWithMsgpack(t)
	_, sock := startReadmeDaemon(t, e, "--rules", "rules.yaml")
	dir := tempDir(t)
	write(t, filepath.Join(dir, "block.py"), b.Body)
	write(t, filepath.Join(dir, "driver.py"), readmePyPrelude+driver)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, filepath.Join(dir, "driver.py"), filepath.Join(dir, "block.py"))
	cmd.Dir = e.dir
	cmd.Env = append(readmeBinEnv(e, "SLUICE_SOCKET="+sock), "PYTHONPATH="+filepath.Join(e.repo, "clientlib", "python"))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v\n%s%s", b, err, out, stderr.String())
	}
	return string(out)
}

// readmePyPrelude starts every Python driver: a hung driver prints where
// it hangs and exits, and the clients the README's blocks make get a
// deadline a loaded test machine meets (the blocks use the 5 ms default).
const readmePyPrelude = `
import faulthandler, sys
faulthandler.dump_traceback_later(60, exit=True)

import sluice, sluice.aio

def _generous(cls):
    init = cls.__init__
    def patched(self, options=None, **kw):
        if options is None:
            kw.setdefault("timeout", 10.0)
        init(self, options, **kw)
    cls.__init__ = patched

_generous(sluice.Client)
_generous(sluice.aio.AsyncClient)

async def bounded_close(client):
    # AsyncClient.close() can hang on Python 3.11 when it cancels the
    # reconnect task inside asyncio.wait_for (which may swallow the
    # cancellation): bounded here, and said on stderr, not a failure of
    # the README's example.
    import asyncio
    try:
        await asyncio.wait_for(client.close(), 5)
    except asyncio.TimeoutError:
        print("AsyncClient.close() did not return within 5 s", file=sys.stderr)
`

// readmePyWait is Python that waits (bounded) until a client is connected.
const readmePyWait = `
import runpy, sys, time

def wait_up(client):
    deadline = time.monotonic() + 15
    while not client.up:
        if time.monotonic() > deadline:
            sys.exit("the client did not connect within 15 s")
        time.sleep(0.005)
`

func readmePythonClient(t *testing.T, e *readmeEnv, b readmeBlock) {
	out := readmePython(t, e, b, readmePyWait+`
ns = runpy.run_path(sys.argv[1])
wait_up(ns["limiter"])
print(ns["upload"]("bob"))
print(ns["upload"]("bob"))
`)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("%s printed %q", b, out)
	}
	want := "the next within a minute `" + lines[1] + "`"
	if lines[0] != "(200, {})" || !strings.Contains(e.readme, "first `upload` returns `"+lines[0]+"`") || !strings.Contains(e.readme, want) {
		t.Errorf("%s: upload twice gave %q; the README says otherwise", b, lines)
	}
}

func readmePythonAsync(t *testing.T, e *readmeEnv, b readmeBlock) {
	out := readmePython(t, e, b, `
import ast, asyncio, sys

async def main():
    ns = {}
    code = compile(open(sys.argv[1]).read(), sys.argv[1], "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    r = eval(code, ns)
    if r is not None:
        await r
    print(ns["d"].allowed, ns["d"].failed_open)
    await bounded_close(ns["limiter"])

asyncio.run(main())
`)
	if strings.TrimSpace(out) != "True False" {
		t.Errorf("%s: allowed, failed_open = %q, want True False", b, out)
	}
}

func readmePythonMiddleware(t *testing.T, e *readmeEnv, b readmeBlock) {
	out := readmePython(t, e, b, readmePyWait+`
import asyncio

ns = runpy.run_path(sys.argv[1])

def app(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"ok"]

wsgi = ns["limit_wsgi"](app)
wait_up(wsgi.limiter.client)

def call(method, path, key):
    got = []
    environ = {"REQUEST_METHOD": method, "PATH_INFO": path, "REMOTE_ADDR": "192.0.2.1", "HTTP_X_API_KEY": key}
    wsgi(environ, lambda status, headers, exc_info=None: got.append(status))
    return got[0].split()[0]

print(call("GET", "/api/items", "k1"), call("POST", "/upload", "k1"), call("POST", "/upload", "k2"), call("GET", "/slow/x", "k1"))

async def asgi_app(scope, receive, send):
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})

async def asgi_call():
    h = ns["limit_asgi"](asgi_app)
    sent = []
    async def receive():
        return {"type": "http.request", "body": b""}
    async def send(m):
        sent.append(m)
    scope = {"type": "http", "method": "GET", "path": "/api/items", "headers": [(b"x-api-key", b"k3")], "client": ("192.0.2.1", 1)}
    await h(scope, receive, send)  # starts the client: fails open while it connects
    deadline = asyncio.get_running_loop().time() + 15
    while not h.limiter.client.up:
        if asyncio.get_running_loop().time() > deadline:
            sys.exit("the asyncio client did not connect within 15 s")
        await asyncio.sleep(0.005)
    sent.clear()
    await h(scope, receive, send)
    await bounded_close(h.limiter.client)
    limited = any(k.lower() == b"x-ratelimit-limit" for k, _ in sent[0]["headers"])
    return "%d %s" % (sent[0]["status"], "limited" if limited else "unlimited")

print(asyncio.run(asgi_call()))
`)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || lines[0] != "200 200 429 200" || lines[1] != "200 limited" {
		t.Errorf("%s: statuses %q, want WSGI 200 200 429 200 (uploads is per route) and ASGI 200 with limit headers", b, out)
	}
}

// The lint transcript, in the scratch directory holding the README's files.
func readmeLint(t *testing.T, e *readmeEnv, b readmeBlock) {
	steps := readmeTranscript(b.Body)
	got := runTranscript(t, e.dir, readmeBinEnv(e), steps)
	for i, s := range steps {
		if !readmeMatches(s.want, got[i]) {
			t.Errorf("%s: $ %s\nprinted:\n%s\nthe README shows:\n%s", b, s.cmd, got[i], s.want)
		}
	}
}

// The built-in proxy, with the README's rules and routes, in front of a
// service: the README's command with its ports replaced by free ones.
func readmeProxyBuiltin(t *testing.T, e *readmeEnv, b readmeBlock) {
	_, _, app, served := forwardAuthFixture(t, 1)
	listen := "127.0.0.1:" + freePort(t)
	args := readmeArgs(t, b, "0.0.0.0:8081", listen, "http://127.0.0.1:8080", app.URL)
	startReadmeDaemon(t, e, args...)
	req, _ := http.NewRequest("GET", "http://"+listen+"/items", nil)
	req.Header.Set("X-API-Key", "proxy-key")
	resp, err := httpAPIClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("X-Ratelimit-Limit") != "100" || served.Load() != 1 {
		t.Fatalf("%s: GET /items through the proxy: %d, headers %v, the service saw %d", b, resp.StatusCode, resp.Header, served.Load())
	}
}

// The daemon and the sidecar proxy as the README starts them (the proxy
// told the daemon's socket, ports replaced), in front of a service.
func readmeProxySidecar(t *testing.T, e *readmeEnv, b readmeBlock) {
	cmds := readmeCommands(b.Body)
	if len(cmds) != 2 || !strings.HasSuffix(cmds[0], "&") {
		t.Fatalf("%s: want a daemon started in the background and a proxy, found %q", b, cmds)
	}
	_, sock := startReadmeDaemon(t, e, readmeSluicedArgs(t, b, cmds[0])...)
	_, _, app, served := forwardAuthFixture(t, 1)
	listen := "127.0.0.1:" + freePort(t)
	args := readmeSluicedArgs(t, b, cmds[1], "0.0.0.0:8081", listen, "http://127.0.0.1:8080", app.URL)
	if len(args) == 0 || args[0] != "proxy" {
		t.Fatalf("%s: want sluiced proxy, found %q", b, cmds[1])
	}
	cmd := exec.Command(binary, append(args, "--socket", sock)...)
	cmd.Dir, cmd.Env = e.dir, readmeBinEnv(e)
	p := startProc(t, cmd)
	var code int
	var limit string
	var answered int64
	// A request the proxy let through failing open (not yet connected to
	// the daemon, or a decision later than its timeout on a loaded
	// machine) carries no limit headers: ask again until one was decided.
	eventually(t, "the sidecar proxy answers with the daemon's decision", func() bool {
		select {
		case err := <-p.exited:
			p.exited <- err
			t.Fatalf("%s: sluiced proxy exited: %v\n%s", b, err, p.stderr.String())
		default:
		}
		req, _ := http.NewRequest("GET", "http://"+listen+"/items", nil)
		req.Header.Set("X-API-Key", "sidecar-key")
		resp, err := httpAPIClient.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		answered++
		code, limit = resp.StatusCode, resp.Header.Get("X-Ratelimit-Limit")
		return limit != ""
	})
	if code != 200 || limit != "100" || served.Load() != answered {
		t.Fatalf("%s: GET /items through sluiced proxy: %d, X-Ratelimit-Limit %q, the service saw %d of %d answered requests", b, code, limit, served.Load(), answered)
	}
}

// The decision API as the README starts it (port replaced) answers.
func readmeHTTPListen(t *testing.T, e *readmeEnv, b readmeBlock) {
	addr := "127.0.0.1:" + freePort(t)
	startReadmeDaemon(t, e, readmeArgs(t, b, "127.0.0.1:9466", addr)...)
	n := &httpAPINode{addr: addr}
	if code, body := n.check(t, `{"checks":[{"rule":"login-per-ip","key":"203.0.113.9"}]}`); code != 200 || !strings.Contains(body, `"allowed":true`) {
		t.Fatalf("%s: POST /v1/check: %d %s", b, code, body)
	}
}

// The curl transcript against the decision API started as the http-listen
// block says: the answers are the README's, timings within a second.
func readmeHTTPCheck(t *testing.T, e *readmeEnv, b readmeBlock) {
	if _, err := exec.LookPath("curl"); err != nil {
		if os.Getenv("SLUICE_REQUIRE_CURL") == "1" {
			t.Fatal("curl is not installed and SLUICE_REQUIRE_CURL=1")
		}
		t.Skip("curl is not installed (apt-get install -y curl)")
	}
	listen := e.readmeBlockNamed(t, "http-listen")
	addr := "127.0.0.1:" + freePort(t)
	startReadmeDaemon(t, e, readmeArgs(t, listen, "127.0.0.1:9466", addr)...)
	steps := readmeTranscript(strings.ReplaceAll(b.Body, "127.0.0.1:9466", addr))
	got := runTranscript(t, e.dir, readmeBinEnv(e), steps)
	for i, s := range steps {
		var want, have any
		if err := json.Unmarshal([]byte(compact(s.want)), &want); err != nil {
			t.Fatalf("%s: the README's answer to step %d is not JSON: %v", b, i+1, err)
		}
		if err := json.Unmarshal([]byte(got[i]), &have); err != nil || !readmeJSONEqual(want, have) {
			t.Errorf("%s: $ %s\nanswered:\n%s\nthe README shows:\n%s", b, s.cmd, got[i], compact(s.want))
		}
	}
}

// readmeBlockNamed finds the block marked "run name".
func (e *readmeEnv) readmeBlockNamed(t *testing.T, name string) readmeBlock {
	t.Helper()
	blocks, _ := parseReadmeBlocks(e.readme)
	for _, b := range blocks {
		if b.Action == "run" && b.Arg == name {
			return b
		}
	}
	t.Fatalf("no README block marked run %s", name)
	return readmeBlock{}
}

// Forward auth with the README's auth-routes.yaml: an upload costs the
// whole uploads burst, so the second is refused with 429.
func readmeHTTPAuth(t *testing.T, e *readmeEnv, b readmeBlock) {
	addr := "127.0.0.1:" + freePort(t)
	startReadmeDaemon(t, e, readmeArgs(t, b, "127.0.0.1:9466", addr)...)
	auth := func() (int, http.Header) {
		req, _ := http.NewRequest("GET", "http://"+addr+"/v1/auth", nil)
		req.Host = "localhost"
		req.Header.Set("X-Original-Method", "POST")
		req.Header.Set("X-Original-URI", "/upload")
		req.Header.Set("X-API-Key", "auth-key")
		resp, err := httpAPIClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, resp.Header
	}
	if code, h := auth(); code != 200 {
		t.Fatalf("%s: first upload: %d %v, want 200", b, code, h)
	}
	if code, h := auth(); code != 429 || h.Get("Retry-After") == "" {
		t.Fatalf("%s: second upload: %d %v, want 429 with Retry-After", b, code, h)
	}
}

// The nginx recipe is the one cmd/sluiced/testdata/nginx-forward-auth.conf
// runs (TestHTTPAPIForwardAuthBehindNginx), and nginx -t accepts it as
// written.
func readmeNginxRecipe(t *testing.T, e *readmeEnv, b readmeBlock) {
	tmpl, err := os.ReadFile(filepath.Join("testdata", "nginx-forward-auth.conf"))
	if err != nil {
		t.Fatal(err)
	}
	_, recipe, _ := strings.Cut(string(tmpl), "# --- the README's recipe starts here ---\n")
	recipe, _, _ = strings.Cut(recipe, "    # --- the README's recipe ends here ---")
	recipe = strings.ReplaceAll(dedent(recipe, "    "), "{{LISTEN}}", "80")
	_, server, ok := strings.Cut(b.Body, "\nserver {")
	if !ok || "server {"+server != recipe {
		t.Errorf("%s: the server block differs from testdata/nginx-forward-auth.conf's recipe (the one the nginx test runs):\nREADME:\n%s\ntestdata:\n%s", b, "server {"+server, recipe)
	}
	bin := nginxBinary(t)
	prefix := tempDir(t)
	conf := strings.NewReplacer("listen 80;", "listen 127.0.0.1:"+freePort(t)+";").Replace(b.Body)
	whole := "worker_processes 1;\npid " + prefix + "/nginx.pid;\nerror_log " + prefix + "/error.log;\nevents { worker_connections 64; }\nhttp {\n" +
		"client_body_temp_path " + prefix + "/body; proxy_temp_path " + prefix + "/proxy; fastcgi_temp_path " + prefix + "/fastcgi; uwsgi_temp_path " + prefix + "/uwsgi; scgi_temp_path " + prefix + "/scgi;\n" +
		conf + "}\n"
	write(t, filepath.Join(prefix, "nginx.conf"), whole)
	if out, err := exec.Command(bin, "-t", "-p", prefix, "-c", filepath.Join(prefix, "nginx.conf"), "-e", filepath.Join(prefix, "error.log")).CombinedOutput(); err != nil {
		t.Errorf("%s: nginx -t: %v\n%s", b, err, out)
	}
}

// The Caddy recipe is the site block cmd/sluiced/testdata/Caddyfile.forward-auth
// runs (TestHTTPAPIForwardAuthBehindCaddy), and caddy adapts it as written.
func readmeCaddyRecipe(t *testing.T, e *readmeEnv, b readmeBlock) {
	tmpl, err := os.ReadFile(filepath.Join("testdata", "Caddyfile.forward-auth"))
	if err != nil {
		t.Fatal(err)
	}
	_, recipe, _ := strings.Cut(string(tmpl), "\tbind 127.0.0.1\n")
	recipe, _, _ = strings.Cut(recipe, "# --- the README's recipe ends here ---")
	recipe = strings.NewReplacer("{{SLUICE_HTTP}}", "127.0.0.1:9466", "{{UPSTREAM}}", "127.0.0.1:8080").Replace(recipe)
	_, site, _ := strings.Cut(b.Body, "{\n")
	if site != recipe {
		t.Errorf("%s: the site block differs from testdata/Caddyfile.forward-auth's (the one the Caddy test runs):\nREADME:\n%s\ntestdata:\n%s", b, site, recipe)
	}
	bin := caddyBinary(t)
	dir := tempDir(t)
	write(t, filepath.Join(dir, "Caddyfile"), b.Body)
	cmd := exec.Command(bin, "adapt", "--config", filepath.Join(dir, "Caddyfile"), "--adapter", "caddyfile")
	cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_DATA_HOME="+dir, "XDG_CONFIG_HOME="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil || !json.Valid(firstJSON(out)) {
		t.Errorf("%s: caddy adapt: %v\n%s", b, err, out)
	}
}

// firstJSON is the JSON document caddy adapt prints (warnings follow it
// on stderr).
func firstJSON(out []byte) []byte {
	s := string(out)
	if i := strings.Index(s, "{"); i >= 0 {
		s = s[i:]
	}
	if i := strings.LastIndex(s, "}"); i >= 0 {
		s = s[:i+1]
	}
	return []byte(s)
}

// dedent removes prefix from every line that has it.
func dedent(s, prefix string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimPrefix(l, prefix)
	}
	return strings.Join(lines, "\n")
}

package main

// TestReadmeExamples takes every code block of README.md as a new user
// would: rules and routes files parsed with the daemon's own parsers, Go
// programs compiled in a module of their own (a replace to this checkout)
// and run against a real sluiced, shell commands executed against real
// daemons, Python run with the Python client, the nginx and Caddy recipes
// checked by nginx and caddy, and what the README says the output is
// compared with what comes out. How each block is taken is its marker's
// (readme_blocks_test.go).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sluicelabs/sluice/config"
)

// readmeEnv is what the blocks share: the scratch directory holding the
// README's files, the binaries, and what one block leaves for the next.
type readmeEnv struct {
	readme  string // the README's text
	repo    string // the checkout's root
	dir     string // scratch directory: the README's files
	bin     string // directory holding sluiced and sluice
	rules   *config.Rules
	gomod   string            // the module the README's Go blocks are built in
	goBuilt bool              // whether the go subtest built it
	goDirs  map[string]string // run name → package directory (relative to gomod)
}

// readmeChecks run the blocks marked "run NAME", in README order.
var readmeChecks = map[string]func(t *testing.T, e *readmeEnv, b readmeBlock){
	"cli-check":         readmeCLICheck,
	"cli-admin":         readmeCLIAdmin,
	"go-service":        readmeGoService,
	"go-module":         readmeGoModule,
	"go-middleware":     readmeGoMiddleware,
	"go-embedded":       readmeGoEmbedded,
	"python-client":     readmePythonClient,
	"python-async":      readmePythonAsync,
	"python-middleware": readmePythonMiddleware,
	"lint":              readmeLint,
	"proxy-builtin":     readmeProxyBuiltin,
	"proxy-sidecar":     readmeProxySidecar,
	"http-listen":       readmeHTTPListen,
	"http-check":        readmeHTTPCheck,
	"http-auth":         readmeHTTPAuth,
	"nginx-recipe":      readmeNginxRecipe,
	"caddy-recipe":      readmeCaddyRecipe,
}

func TestReadmeExamples(t *testing.T) {
	t.Parallel()
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	text, err := os.ReadFile(filepath.Join(repo, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks, errs := parseReadmeBlocks(string(text))
	for _, err := range errs {
		t.Error(err)
	}
	if len(errs) > 0 {
		t.FailNow()
	}
	// Every check is used by exactly one block, every block's check exists.
	used := map[string]int{}
	for _, b := range blocks {
		if b.Action == "run" {
			if readmeChecks[b.Arg] == nil {
				t.Errorf("%s: no check named %q in readmeChecks (readme_test.go)", b, b.Arg)
			}
			used[b.Arg]++
		}
	}
	for name := range readmeChecks {
		if used[name] != 1 {
			t.Errorf("check %q is used by %d README blocks, want 1", name, used[name])
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	buildSluiceCLI(t)
	e := &readmeEnv{readme: string(text), repo: repo, dir: tempDir(t), bin: filepath.Dir(binary), goDirs: map[string]string{}}
	e.gomod = filepath.Join(tempDir(t), "myservice") // outlives the go subtest, which makes it
	readmeFiles(t, e, blocks)

	counts := map[string]int{}
	for _, b := range blocks {
		counts[b.Action+" "+b.Lang]++
	}
	t.Logf("README blocks by marker and language: %v", counts)

	t.Run("syntax", func(t *testing.T) {
		for _, b := range blocks {
			if b.Action == "syntax" {
				readmeSyntax(t, b)
			}
		}
	})
	t.Run("flags", func(t *testing.T) {
		n := 0
		for _, b := range blocks {
			if b.Action != "skip" && (b.Lang == "sh" || b.Lang == "console") {
				n += readmeFlags(t, e, b)
			}
		}
		t.Logf("%d flags on sluiced and sluice command lines are the binaries' own", n)
	})
	t.Run("go", func(t *testing.T) {
		e.goBuilt = readmeGoBuild(t, e, blocks)
	})
	for _, b := range blocks {
		if b.Action != "run" {
			continue
		}
		t.Run(b.Arg, func(t *testing.T) {
			if strings.HasPrefix(b.Arg, "go-") && !e.goBuilt {
				t.Skip("the README's Go module was not built (the go subtest failed or did not run)")
			}
			readmeChecks[b.Arg](t, e, b)
		})
	}
}

// readmeFiles writes the rules, routes and plain files to the scratch
// directory, checking rules and routes with the daemon's parsers (routes
// against rules.yaml).
func readmeFiles(t *testing.T, e *readmeEnv, blocks []readmeBlock) {
	seen := map[string]readmeBlock{}
	for _, pass := range []string{"rules", "routes", "file"} {
		for _, b := range blocks {
			if b.Action != pass {
				continue
			}
			if prev, dup := seen[b.Arg]; dup {
				t.Errorf("%s: file %s is also %s", b, b.Arg, prev)
				continue
			}
			seen[b.Arg] = b
			switch b.Action {
			case "rules":
				rs, err := config.ParseRules(b.Arg, []byte(b.Body))
				if err != nil {
					t.Errorf("%s: %v", b, err)
				} else if b.Arg == "rules.yaml" {
					e.rules = rs
				}
			case "routes":
				if e.rules == nil {
					t.Fatalf("%s: routes need the README's rules.yaml", b)
				}
				r, err := config.ParseProxyRoutes(b.Arg, []byte(b.Body))
				if err == nil {
					err = r.CheckRules(config.RulesLookup(e.rules))
				}
				if err != nil {
					t.Errorf("%s: against rules.yaml: %v", b, err)
				}
			}
			if err := os.WriteFile(filepath.Join(e.dir, b.Arg), []byte(b.Body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	if e.rules == nil {
		t.Fatal("the README has no block marked <!-- readme-test: rules rules.yaml -->")
	}
}

// readmeSyntax checks a block that cannot run here as far as can be done.
func readmeSyntax(t *testing.T, b readmeBlock) {
	t.Helper()
	switch b.Lang {
	case "sh", "bash":
		cmd := exec.Command("bash", "-n")
		cmd.Stdin = strings.NewReader(b.Body)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s: bash -n: %v\n%s", b, err, out)
		}
	case "yaml":
		dec := yaml.NewDecoder(strings.NewReader(b.Body))
		for {
			var v any
			if err := dec.Decode(&v); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Errorf("%s: not YAML: %v", b, err)
				break
			}
		}
	case "json":
		if !json.Valid([]byte(b.Body)) {
			t.Errorf("%s: not JSON", b)
		}
	default:
		t.Errorf("%s: no syntax check for ```%s: run it, or skip it with a reason", b, b.Lang)
	}
}

// readmeFlags checks that every --flag a sluiced or sluice command line of
// the block passes is one the built binary lists in its --help (for the
// subcommand it names), so a block only syntax-checked still names real
// flags.
func readmeFlags(t *testing.T, e *readmeEnv, b readmeBlock) (checked int) {
	t.Helper()
	body := b.Body
	if b.Lang == "console" {
		var cmds []string
		for _, s := range readmeTranscript(body) {
			cmds = append(cmds, s.cmd)
		}
		body = strings.Join(cmds, "\n")
	}
	for _, line := range readmeCommands(body) {
		line, _, _ = strings.Cut(line, "#")
		f := strings.Fields(strings.NewReplacer("[", " ", "]", " ", "&", " ", "(", " ", ")", " ").Replace(line))
		for len(f) > 0 && strings.Contains(f[0], "=") && !strings.HasPrefix(f[0], "-") {
			f = f[1:] // VAR=value before the command
		}
		if len(f) == 0 || (f[0] != "sluiced" && f[0] != "sluice") {
			continue
		}
		help := e.help(t, f[0], "")
		if len(f) > 1 && !strings.HasPrefix(f[1], "-") && (f[0] == "sluice" || f[1] == "proxy") {
			help += e.help(t, f[0], f[1])
		}
		for _, w := range f[1:] {
			name, ok := strings.CutPrefix(w, "--")
			if !ok || name == "" {
				continue
			}
			name, _, _ = strings.Cut(name, "=")
			checked++
			if !regexp.MustCompile(`--` + regexp.QuoteMeta(name) + `([^a-z0-9-]|$)`).MatchString(help) {
				t.Errorf("%s: %q passes --%s, which %s does not list in its --help", b, line, name, strings.Join(f[:min(2, len(f))], " "))
			}
		}
	}
	return checked
}

// help is the --help of a built binary ("sluiced" or "sluice") or of one
// of its subcommands.
func (e *readmeEnv) help(t *testing.T, bin, sub string) string {
	t.Helper()
	args := []string{"--help"}
	if sub != "" {
		args = []string{sub, "--help"}
	}
	out, err := exec.Command(filepath.Join(e.bin, bin), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", bin, args, err, out)
	}
	return string(out)
}

// readmeGoBuild builds every Go block in one module, made as the README
// tells a user to (the go-module block), each block a package of its own,
// with a driver test beside the ones a check runs.
func readmeGoBuild(t *testing.T, e *readmeEnv, blocks []readmeBlock) (ok bool) {
	mod := e.gomod
	if err := os.Mkdir(mod, 0o755); err != nil {
		t.Fatal(err)
	}
	var service, module *readmeBlock
	for i, b := range blocks {
		switch {
		case b.Action == "run" && b.Arg == "go-service":
			service = &blocks[i]
		case b.Action == "run" && b.Arg == "go-module":
			module = &blocks[i]
		}
	}
	if service == nil || module == nil {
		t.Fatal("the README lost its go-service or go-module block")
	}
	// The user's steps: main.go, then the module commands, with this
	// checkout in place of ../sluice.
	write(t, filepath.Join(mod, "main.go"), service.Body)
	script := strings.ReplaceAll(module.Body, "../sluice", e.repo)
	if out, err := readmeShell(mod, readmeGoEnv(), script); err != nil {
		t.Fatalf("%s: %v\n%s", module, err, out)
	}
	e.goDirs["go-service"] = "."
	n := 0
	for _, b := range blocks {
		if b.Lang != "go" || b.Arg == "go-service" {
			continue
		}
		if b.Action != "build" && b.Action != "run" {
			t.Errorf("%s: a Go block is built (build) or run (run NAME)", b)
			continue
		}
		n++
		pkg := fmt.Sprintf("readme%d", b.Line)
		write(t, filepath.Join(mod, pkg, "main.go"), b.Body)
		if b.Action == "run" {
			e.goDirs[b.Arg] = pkg
		}
	}
	for name, src := range readmeGoDrivers {
		pkg, ok := e.goDirs[name]
		if !ok {
			t.Fatalf("no Go block for the driver of %s", name)
		}
		write(t, filepath.Join(mod, pkg, "readme_driver_test.go"), src)
	}
	// The other blocks import packages main.go did not: tidy again (-e:
	// offline, the tests of dependencies' dependencies cannot be found,
	// and nothing here needs them).
	for _, args := range [][]string{{"mod", "tidy", "-e"}, {"vet", "./..."}, {"build", "./..."}} {
		cmd := exec.Command("go", args...)
		cmd.Dir, cmd.Env = mod, readmeGoEnv()
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %s in the README's module: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	t.Logf("the README's %d Go blocks build in a module of their own (go vet clean)", n+1)
	return true
}

// readmeGoEnv is the go command's environment for the README's module:
// nothing downloaded (every module is the checkout's, in the module cache).
// The checksum database is not asked either: what the module cache holds
// was checked against the checkout's go.sum when it was downloaded, and a
// machine that reaches the module proxy may not reach sum.golang.org.
func readmeGoEnv() []string {
	return append(os.Environ(), "GOPROXY=off", "GOSUMDB=off", "GOFLAGS=-mod=mod", "GOWORK=off")
}

// readmeShell runs script with bash -euo pipefail in dir, bounded to 2 minutes.
func readmeShell(dir string, env []string, script string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", script)
	cmd.Dir, cmd.Env = dir, env
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// readmeCommands are a shell block's commands: comments dropped, lines
// ending in a backslash joined; "go run ./cmd/X" becomes the built X.
func readmeCommands(body string) []string {
	var out []string
	cur := ""
	for _, line := range strings.Split(body, "\n") {
		line = strings.TrimSpace(line)
		if strings.HasSuffix(line, `\`) {
			cur += strings.TrimSuffix(line, `\`) + " "
			continue
		}
		line = cur + line
		cur = ""
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		line = strings.Replace(line, "go run ./cmd/sluiced", "sluiced", 1)
		line = strings.Replace(line, "go run ./cmd/sluice", "sluice", 1)
		out = append(out, line)
	}
	return out
}

// readmeTranscript is a console block: commands after "$ " and the output
// the README says each prints.
type readmeStep struct {
	cmd  string
	want string
}

func readmeTranscript(body string) []readmeStep {
	var steps []readmeStep
	lines := strings.Split(strings.TrimRight(body, "\n"), "\n")
	for i := 0; i < len(lines); i++ {
		cmd, ok := strings.CutPrefix(lines[i], "$ ")
		if !ok {
			continue
		}
		for strings.HasSuffix(cmd, `\`) && i+1 < len(lines) {
			i++
			cmd = strings.TrimSuffix(cmd, `\`) + " " + strings.TrimSpace(lines[i])
		}
		var want []string
		for i+1 < len(lines) && !strings.HasPrefix(lines[i+1], "$ ") {
			i++
			want = append(want, lines[i])
		}
		steps = append(steps, readmeStep{cmd: cmd, want: strings.TrimSpace(strings.Join(want, "\n"))})
	}
	return steps
}

// runTranscript runs the steps in one bash session in dir and returns each
// step's output (stdout and stderr), so that "echo $?" sees the step before.
func runTranscript(t *testing.T, dir string, env []string, steps []readmeStep) []string {
	t.Helper()
	var script strings.Builder
	script.WriteString("rc=0\n")
	for i, s := range steps {
		fmt.Fprintf(&script, "echo '@@step %d'\n", i)
		fmt.Fprintf(&script, "(exit $rc); %s 2>&1 && rc=0 || rc=$?\n", s.cmd)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script.String())
	cmd.Dir, cmd.Env = dir, env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("transcript: %v\n%s", err, out)
	}
	parts := regexp.MustCompile(`(?m)^@@step \d+\n`).Split(string(out), -1)
	if len(parts) != len(steps)+1 {
		t.Fatalf("transcript: %d outputs for %d steps:\n%s", len(parts)-1, len(steps), out)
	}
	return parts[1:]
}

// readmeMatches reports whether got is what the README shows, where "..."
// in the README stands for any text.
func readmeMatches(want, got string) bool {
	re := "^" + strings.ReplaceAll(regexp.QuoteMeta(strings.TrimSpace(want)), `\.\.\.`, `.*`) + "$"
	return regexp.MustCompile(re).MatchString(strings.TrimSpace(got))
}

// readmeBinEnv is the environment shell blocks run in: the built sluiced
// and sluice first on PATH, plus extra.
func readmeBinEnv(e *readmeEnv, extra ...string) []string {
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "SLUICE_") || strings.HasPrefix(kv, "PATH=")
	})
	env = append(env, "PATH="+e.bin+string(os.PathListSeparator)+os.Getenv("PATH"), "SLUICE_ADMIN_ADDR=")
	return append(env, extra...)
}

// startReadmeDaemon starts the built sluiced in the scratch directory with
// args (and its own socket), waiting until the socket answers.
func startReadmeDaemon(t *testing.T, e *readmeEnv, args ...string) (p *proc, sock string) {
	t.Helper()
	sock = filepath.Join(tempDir(t), "sluiced.sock")
	cmd := exec.Command(binary, append([]string{"--socket", sock}, args...)...)
	cmd.Dir, cmd.Env = e.dir, readmeBinEnv(e)
	p = startProc(t, cmd)
	eventually(t, "sluiced serves its socket", func() bool {
		select {
		case err := <-p.exited:
			p.exited <- err
			t.Fatalf("sluiced %v exited: %v\n%s", args, err, p.stderr.String())
		default:
		}
		return strings.Contains(p.stderr.String(), "sluiced serving")
	})
	return p, sock
}

// readmeArgs splits a one-line sluiced command into its arguments, with
// the README's fixed ports replaced.
func readmeArgs(t *testing.T, b readmeBlock, replace ...string) []string {
	t.Helper()
	cmds := readmeCommands(b.Body)
	if len(cmds) != 1 {
		t.Fatalf("%s: want one command, found %d", b, len(cmds))
	}
	return readmeSluicedArgs(t, b, cmds[0], replace...)
}

// readmeSluicedArgs splits one sluiced command line (no quoting, a
// trailing comment or & allowed) into its arguments.
func readmeSluicedArgs(t *testing.T, b readmeBlock, cmd string, replace ...string) []string {
	t.Helper()
	line := strings.NewReplacer(replace...).Replace(cmd)
	line, _, _ = strings.Cut(line, "#")
	line = strings.TrimSuffix(strings.TrimSpace(line), "&")
	f := strings.Fields(line)
	if len(f) == 0 || f[0] != "sluiced" {
		t.Fatalf("%s: want a sluiced command, found %q", b, cmd)
	}
	return f[1:]
}

// readmeJSONEqual compares two JSON documents, allowing timing fields
// (retry_after, reset_after) to differ by up to a second.
func readmeJSONEqual(want, got any) bool {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok || len(g) != len(w) {
			return false
		}
		for k, wv := range w {
			gv, ok := g[k]
			if !ok {
				return false
			}
			if k == "retry_after" || k == "reset_after" {
				wf, _ := wv.(float64)
				gf, _ := gv.(float64)
				if d := wf - gf; d > 1 || d < -1 {
					return false
				}
				continue
			}
			if !readmeJSONEqual(wv, gv) {
				return false
			}
		}
		return true
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return false
		}
		for i := range w {
			if !readmeJSONEqual(w[i], g[i]) {
				return false
			}
		}
		return true
	default:
		return fmt.Sprint(want) == fmt.Sprint(got)
	}
}

// compact removes the layout of a JSON text written over several lines.
func compact(s string) string {
	var b bytes.Buffer
	if err := json.Compact(&b, []byte(s)); err != nil {
		return s
	}
	return b.String()
}

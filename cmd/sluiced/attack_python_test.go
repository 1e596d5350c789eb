package main

// The Python client (clientlib/python) against this package's real sluiced
// binary: its unittest suite replays the spec's vectors, and attacks a
// live daemon (killed, stopped, absent, untrusted) through the client, the
// asyncio client and the WSGI/ASGI middleware. And the package installs
// with pip, offline, into a fresh virtual environment.

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// pythonRequireEnv makes a missing python3 or msgpack a failure instead of
// a skip (.ci/run sets it after installing them).
const pythonRequireEnv = "SLUICE_REQUIRE_PYTHON"

// pythonClientDir is the Python package, relative to this package.
const pythonClientDir = "../../clientlib/python"

// pythonWithMsgpack returns a python3 that can import msgpack: $SLUICE_PYTHON
// if set, else python3 on PATH, else Debian's /usr/bin/python3 (a python3
// of another origin first on PATH does not see Debian's python3-msgpack).
// When none can, it skips the test, or fails it under SLUICE_REQUIRE_PYTHON.
func pythonWithMsgpack(t *testing.T) string {
	t.Helper()
	var candidates []string
	if p := os.Getenv("SLUICE_PYTHON"); p != "" {
		candidates = append(candidates, p)
	}
	if p, err := exec.LookPath("python3"); err == nil {
		candidates = append(candidates, p)
	}
	candidates = append(candidates, "/usr/bin/python3")
	var tried []string
	for _, p := range candidates {
		out, err := exec.Command(p, "-c", "import sys, msgpack; assert sys.version_info >= (3, 9)").CombinedOutput()
		if err == nil {
			return p
		}
		tried = append(tried, p+": "+strings.TrimSpace(lastLine(string(out))))
	}
	why := "no python3 (3.9 or later) with msgpack: install python3 and python3-msgpack (tried " + strings.Join(tried, "; ") + ")"
	if os.Getenv(pythonRequireEnv) == "1" {
		t.Fatal(why + "; " + pythonRequireEnv + "=1")
	}
	t.Skip(why)
	return ""
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// TestPythonClient runs the Python client's whole unittest suite against
// the sluiced this test run built. No test of it may skip here.
func TestPythonClient(t *testing.T) {
	t.Parallel()
	py := pythonWithMsgpack(t)
	dir, err := filepath.Abs(pythonClientDir)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, "-m", "unittest", "-v")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "SLUICE_TEST_SLUICED="+binary, "PYTHONDONTWRITEBYTECODE=1",
		"SLUICE_VECTORS="+filepath.Join(dir, "..", "..", "ipc", "testdata", "vectors.json"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python3 -m unittest in clientlib/python: %v\n%s", err, out)
	}
	res := lastLine(string(out))
	if !strings.HasPrefix(res, "OK") || strings.Contains(res, "skipped") {
		t.Fatalf("python tests did not all run: %q\n%s", res, out)
	}
	t.Logf("python client tests (%s): %s", py, res)
}

// TestPythonClientInstallsOffline installs the package with pip into a
// fresh virtual environment that sees the system's msgpack, without the
// network (--no-index; --no-build-isolation builds with the system's
// setuptools instead of downloading one), and imports it from elsewhere.
func TestPythonClientInstallsOffline(t *testing.T) {
	t.Parallel()
	py := pythonWithMsgpack(t)
	if out, err := exec.Command(py, "-c", "import venv, ensurepip, setuptools").CombinedOutput(); err != nil {
		why := "python3 lacks venv, ensurepip or setuptools (Debian: python3-venv python3-setuptools): " + lastLine(string(out))
		if os.Getenv(pythonRequireEnv) == "1" {
			t.Fatal(why)
		}
		t.Skip(why)
	}
	src, err := filepath.Abs(pythonClientDir)
	if err != nil {
		t.Fatal(err)
	}
	// Build from a copy: a build writes build/ and *.egg-info beside the sources.
	work := tempDir(t)
	pkg := filepath.Join(work, "pkg")
	if out, err := exec.Command("cp", "-r", src, pkg).CombinedOutput(); err != nil {
		t.Fatalf("copy the package: %v\n%s", err, out)
	}
	venv := filepath.Join(work, "venv")
	run := func(name string, args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir = work
		cmd.Env = append(os.Environ(), "PIP_NO_INDEX=1", "PIP_DISABLE_PIP_VERSION_CHECK=1", "PYTHONDONTWRITEBYTECODE=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	run(py, "-m", "venv", "--system-site-packages", venv)
	run(filepath.Join(venv, "bin", "pip"), "install", "--no-index", "--no-build-isolation", pkg)
	got := run(filepath.Join(venv, "bin", "python"), "-c",
		"import sluice, sluice.aio, sluice.middleware, importlib.metadata as m; print(sluice.__file__); print(m.requires('sluice'))")
	if !strings.Contains(got, filepath.Join(venv, "lib")) || !strings.Contains(got, "['msgpack']") {
		t.Fatalf("installed package: %s", got)
	}
}

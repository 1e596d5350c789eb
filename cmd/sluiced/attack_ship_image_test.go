package main

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/clientlib"
)

// The container image, tested without running a container: built with
// podman or buildah from deploy/container/Containerfile.scratch, saved,
// unpacked, and its binary run chrooted into the unpacked filesystem (so
// nothing but the image's files is there) as the image's user.

// imageUID is the numeric user the Containerfiles name.
const imageUID = 65532

// imageBuilder is podman or buildah's command to build an image, or "" with
// why not.
func imageBuilder() (build []string, why string) {
	if p, err := exec.LookPath("podman"); err == nil {
		return []string{p, "build"}, ""
	}
	if p, err := exec.LookPath("buildah"); err == nil {
		return []string{p, "bud"}, ""
	}
	return nil, "neither podman nor buildah is installed (apt-get install podman)"
}

// skipImage skips the test with why, or fails it when SLUICE_REQUIRE_IMAGE=1
// (CI, where the image must be built and tested).
func skipImage(t *testing.T, why string) {
	t.Helper()
	if os.Getenv("SLUICE_REQUIRE_IMAGE") == "1" {
		t.Fatalf("SLUICE_REQUIRE_IMAGE=1 but the image cannot be tested here: %s", why)
	}
	t.Skipf("image not tested: %s (set SLUICE_REQUIRE_IMAGE=1 to make this a failure)", why)
}

// buildImage builds the static binary of the package in pkgDir as
// dist/<bin>-linux-<arch> and, from it, the image of containerfile (in
// deploy/container), skipping the test (see skipImage) where no image can
// be built here. The image is removed when the test ends. It returns the
// builder, the image's tag, and a directory for the test's files that the
// image's user can enter.
func buildImage(t *testing.T, pkgDir, bin, containerfile string) (tool, tag, dir string) {
	t.Helper()
	build, why := imageBuilder()
	if build == nil {
		skipImage(t, why)
	}
	if os.Geteuid() != 0 {
		skipImage(t, "not root: the image is built with root's podman storage and its filesystem entered with chroot")
	}
	tool = build[0]
	dir = tempDir(t)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	arch := runtime.GOARCH
	ctx := filepath.Join(dir, "ctx")
	if err := os.MkdirAll(filepath.Join(ctx, "dist"), 0o755); err != nil {
		t.Fatal(err)
	}
	gobuild := exec.Command("go", "build", "-trimpath", "-ldflags=-buildid=", "-o", filepath.Join(ctx, "dist", bin+"-linux-"+arch), ".")
	gobuild.Dir = pkgDir
	gobuild.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := gobuild.CombinedOutput(); err != nil {
		t.Fatalf("static build of %s: %v\n%s", bin, err, out)
	}
	tag = fmt.Sprintf("localhost/%s-imagetest:%d", bin, os.Getpid())
	bctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(bctx, tool, append(build[1:], "--layers=false", "--build-arg", "TARGETARCH="+arch,
		"-f", filepath.Join("..", "..", "deploy", "container", containerfile), "-t", tag, ctx)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		skipImage(t, fmt.Sprintf("%s cannot build here: %v\n%s", tool, err, out))
	}
	t.Cleanup(func() { exec.Command(tool, "rmi", "-f", tag).Run() })
	return tool, tag, dir
}

// saveImage saves the image tag and unpacks its layers into dir/rootfs;
// it returns that path and the names at the filesystem's root.
func saveImage(t *testing.T, tool, tag, dir string) (rootfs string, files []string) {
	t.Helper()
	archive := filepath.Join(dir, "image.tar")
	if out, err := exec.Command(tool, "save", "--format", "docker-archive", "-o", archive, tag).CombinedOutput(); err != nil {
		t.Fatalf("save: %v\n%s", err, out)
	}
	rootfs = filepath.Join(dir, "rootfs")
	return rootfs, unpackImage(t, archive, filepath.Join(dir, "image"), rootfs)
}

func TestShipImageHoldsOnlyTheBinaryAndStartsFromIt(t *testing.T) {
	t.Parallel()
	// The binary as scripts/release.sh builds it (static, trimmed); the
	// script itself, and its reproducibility, are .ci/run's release step.
	tool, tag, dir := buildImage(t, ".", "sluiced", "Containerfile.scratch")

	// The image's configuration: a numeric non-root user, the binary as entrypoint.
	out, err := exec.Command(tool, "inspect", "--format", "{{.Config.User}} {{json .Config.Entrypoint}}", tag).CombinedOutput()
	if err != nil {
		t.Fatalf("inspect: %v\n%s", err, out)
	}
	if got := strings.TrimSpace(string(out)); got != fmt.Sprintf(`%d:%d ["/sluiced"]`, imageUID, imageUID) {
		t.Errorf("image config: user and entrypoint %q", got)
	}

	// Its filesystem: the layers of `save`, unpacked.
	rootfs, files := saveImage(t, tool, tag, dir)
	if len(files) != 1 || files[0] != "sluiced" {
		t.Fatalf("the image holds %q; want the binary alone", files)
	}

	chrooted := func(args ...string) *exec.Cmd {
		c := exec.Command("/sluiced", args...)
		c.Dir = "/"
		c.Env = []string{} // nothing: not even PATH
		c.SysProcAttr = &syscall.SysProcAttr{Chroot: rootfs, Credential: &syscall.Credential{Uid: imageUID, Gid: imageUID}}
		return c
	}
	if out, err := chrooted("--version").CombinedOutput(); err != nil || !strings.HasPrefix(string(out), "sluiced version ") {
		t.Fatalf("sluiced --version from the image: %v\n%s", err, out)
	}
	// The Kubernetes example's app container runs the same binary (sluiced
	// proxy) as another user.
	asApp := chrooted("--version")
	asApp.SysProcAttr.Credential = &syscall.Credential{Uid: 10001, Gid: 10001}
	if out, err := asApp.CombinedOutput(); err != nil {
		t.Fatalf("sluiced --version from the image as uid 10001 (the example app's): %v\n%s", err, out)
	}

	// The daemon on its embedded defaults, its socket in a directory of its
	// own (a volume, in a pod), answering a check and its health endpoint.
	sockDir := filepath.Join(rootfs, "sock")
	if err := os.Mkdir(sockDir, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(sockDir, imageUID, imageUID); err != nil {
		t.Fatal(err)
	}
	admin := "127.0.0.1:" + freePort(t)
	d := chrooted("--socket", "/sock/sluiced.sock", "--admin-addr", admin)
	p := &proc{cmd: d, stderr: &syncBuffer{}, exited: make(chan error, 1)}
	d.Stderr = p.stderr
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.exited <- d.Wait() }()
	t.Cleanup(func() { d.Process.Kill(); <-p.exited })
	n := &adminNode{p: p, sock: filepath.Join(sockDir, "sluiced.sock"), admin: admin}
	eventually(t, "the daemon from the image serves", func() bool {
		select {
		case err := <-p.exited:
			p.exited <- err
			t.Fatalf("sluiced from the image exited: %v\n%s", err, p.stderr.String())
		default:
		}
		code, _ := adminRequest(t, "GET", "http://"+admin+"/healthz", "", nil, "")
		return code == 200
	})
	c, err := clientlib.Dial(context.Background(), clientlib.Options{SocketPath: n.sock, Timeout: 5 * time.Second, DaemonUIDs: []uint32{imageUID}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if dec := c.Allow(context.Background(), "default", "k"); dec.FailedOpen || !dec.Allowed || dec.Limit != 100 {
		t.Fatalf("decision from the image's daemon on the embedded defaults: %+v\n%s", dec, p.stderr.String())
	}
}

// unpackImage unpacks a docker-archive's layers, in order, into rootfs and
// returns the regular files and links it holds (relative paths, sorted).
func unpackImage(t *testing.T, archive, dir, rootfs string) []string {
	t.Helper()
	untar(t, archive, dir, true)
	var manifest []struct{ Layers []string }
	b, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil || json.Unmarshal(b, &manifest) != nil || len(manifest) != 1 {
		t.Fatalf("image archive manifest: %v %s", err, b)
	}
	for _, l := range manifest[0].Layers {
		untar(t, filepath.Join(dir, l), rootfs, false)
	}
	var files []string
	err = filepath.WalkDir(rootfs, func(p string, e fs.DirEntry, err error) error {
		if err == nil && !e.IsDir() {
			rel, _ := filepath.Rel(rootfs, p)
			files = append(files, rel)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// untar unpacks a tar file into dir: regular files and directories only
// (an image of one static binary holds nothing else), no path outside dir.
// skipLinks skips symbolic links (the archive's legacy layout has some)
// instead of failing.
func untar(t *testing.T, file, dir string, skipLinks bool) {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for i := 0; ; i++ {
		if i > 10_000 {
			t.Fatalf("%s: more than 10000 entries", file)
		}
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatalf("untar %s: %v", file, err)
		}
		name := filepath.Clean(h.Name)
		if !filepath.IsLocal(name) {
			t.Fatalf("untar %s: entry %q leaves the directory", file, h.Name)
		}
		target := filepath.Join(dir, name)
		switch h.Typeflag {
		case tar.TypeSymlink:
			if !skipLinks {
				t.Fatalf("untar %s: symbolic link %q: an image of one static binary should hold none", file, h.Name)
			}
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				t.Fatal(err)
			}
			out, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, fs.FileMode(h.Mode)&0o755)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(out, io.LimitReader(tr, 1<<30)); err != nil {
				t.Fatal(err)
			}
			out.Close()
		default:
			t.Fatalf("untar %s: entry %q of type %c: an image of one static binary should hold none", file, h.Name, h.Typeflag)
		}
	}
}

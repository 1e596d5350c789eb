package main

import (
	"context"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/sluicelabs/sluice/daemon/adminapi"
)

// qemuRequireEnv makes a missing qemu-aarch64 a failure, not a skip.
const qemuRequireEnv = "SLUICE_REQUIRE_QEMU"

// The arm64 release build, run: scripts/release.sh builds linux/arm64
// (static, as released), and the binaries run under qemu's user-mode
// emulation (Debian's qemu-user; natively on an arm64 machine). The arm64
// sluiced prints its stamped version, serves, decides for an amd64
// client over its socket, and gossips with an amd64 sluiced in one
// keyed cluster (a spend on it reaches the other): the wire formats do not
// depend on the architecture. Emulation runs the arm64 instructions, not
// an arm64 kernel or CPU: timing and memory figures are not arm64's.
// Skips without qemu-aarch64; SLUICE_REQUIRE_QEMU=1 (set by .ci/run)
// fails instead.
func TestShipArm64ReleaseRunsUnderEmulation(t *testing.T) {
	t.Parallel()
	var emulator []string
	if runtime.GOARCH != "arm64" {
		qemu, err := exec.LookPath("qemu-aarch64")
		if err != nil {
			if os.Getenv(qemuRequireEnv) != "" {
				t.Fatalf("%s is set but qemu-aarch64 is not installed: %v", qemuRequireEnv, err)
			}
			t.Skipf("skipped: qemu-aarch64 is not installed (apt-get install qemu-user): %v", err)
		}
		emulator = []string{qemu}
	}
	dir := tempDir(t)
	build := exec.Command("bash", filepath.Join("..", "..", "scripts", "release.sh"), dir)
	build.Env = append(os.Environ(), "TARGETS=linux/arm64", "VERSION="+shipVersion)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("scripts/release.sh for linux/arm64: %v\n%s", err, out)
	}
	bin := filepath.Join(dir, "sluiced-linux-arm64")
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	if f.Machine != elf.EM_AARCH64 || f.Class != elf.ELFCLASS64 {
		t.Fatalf("%s is %v %v, want an arm64 ELF", bin, f.Class, f.Machine)
	}
	f.Close()
	run := func(args ...string) *exec.Cmd {
		if len(emulator) == 0 {
			return exec.Command(bin, args...)
		}
		return exec.Command(emulator[0], append([]string{bin}, args...)...)
	}
	if out, err := run("--version").CombinedOutput(); err != nil || !strings.HasPrefix(string(out), "sluiced version "+shipVersion) {
		t.Fatalf("the arm64 sluiced --version: %v\n%s", err, out)
	}

	rules := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(rules, []byte("rules:\n  slow:\n    rate: 10/1h\n    burst: 100\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	key := secureKeyFile(t, dir, secureKey)
	gossipAmd, gossipArm := freePort(t), freePort(t)
	amd := startShipNode(t, binary, dir, "amd64", "--rules", rules, "--bind", "127.0.0.1:"+gossipAmd, "--gossip-key-file", key)
	arm := &adminNode{sock: filepath.Join(dir, "arm64.sock"), admin: "127.0.0.1:" + freePort(t)}
	cmd := run("--socket", arm.sock, "--node-name", "arm64", "--admin-addr", arm.admin, "--rules", rules,
		"--bind", "127.0.0.1:"+gossipArm, "--join", "127.0.0.1:"+gossipAmd, "--gossip-key-file", key)
	cmd.Env = append(os.Environ(), "SLUICE_ADMIN_ADDR=")
	arm.p = startProc(t, cmd)
	arm.awaitServing(t, "arm64")
	for _, n := range []*adminNode{amd, arm} {
		eventually(t, "both see the amd64 and the arm64 member alive", func() bool {
			var v adminapi.MembersView
			adminJSON(t, n.admin, "/v1/members", &v)
			alive := 0
			for _, m := range v.Members {
				if m.State == "alive" {
					alive++
				}
			}
			return alive == 2
		})
	}
	for i := range 5 {
		if d := arm.c.Allow(context.Background(), "slow", "cross-arch"); !d.Allowed || d.FailedOpen {
			t.Fatalf("check %d on the arm64 sluiced: %+v", i, d)
		}
	}
	eventually(t, "the amd64 member hears of the arm64 member's spend", func() bool {
		var k adminapi.KeyView
		adminJSON(t, amd.admin, "/v1/keys/slow/cross-arch", &k)
		return k.Balance < 95.1 // five of the burst of 100 spent (10 an hour refill)
	})
	if len(emulator) > 0 {
		t.Logf("the arm64 build ran under %s", emulator[0])
	}
}

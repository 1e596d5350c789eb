package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestVersionFlagAndCommandAgree(t *testing.T) {
	var flagOut, cmdOut, stderr bytes.Buffer
	if code := run([]string{"sluice", "--version"}, &flagOut, &stderr); code != exitOK {
		t.Fatalf("--version: exit %d %s", code, stderr.String())
	}
	if code := run([]string{"sluice", "version"}, &cmdOut, &stderr); code != exitOK {
		t.Fatalf("version: exit %d %s", code, stderr.String())
	}
	if flagOut.String() != cmdOut.String() || !strings.HasPrefix(cmdOut.String(), "sluice version ") {
		t.Fatalf("--version %q, version %q", flagOut.String(), cmdOut.String())
	}
}

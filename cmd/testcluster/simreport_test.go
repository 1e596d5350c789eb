package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/testcluster/sim"
)

// The report's matrix runs both designs from 3 to 10,000 nodes: owner mode
// at every size of the hot and spread tables, broadcast (fan-out, relayed
// above 64) only where it is affordable, and every row's command repeats
// its configuration.
func TestReportTables(t *testing.T) {
	sizes := map[string]map[string][]int{}
	for _, tb := range reportTables {
		sizes[tb.marker] = map[string][]int{}
		for _, c := range tb.runs {
			d := designOf(c)
			sizes[tb.marker][d] = append(sizes[tb.marker][d], c.Nodes)
			if d == "broadcast" && (c.Nodes > 64) != (c.GossipMode == "relay") {
				t.Errorf("%s: broadcast at %d nodes in mode %q", tb.marker, c.Nodes, c.GossipMode)
			}
			if c.Seed != 1 {
				t.Errorf("%s: seed %d", tb.marker, c.Seed)
			}
		}
	}
	for _, tc := range []struct {
		table, design string
		largest       int
	}{
		{"sim-hot", "owner", 10000}, {"sim-hot", "broadcast", 2000},
		{"sim-spread", "owner", 10000}, {"sim-spread", "broadcast", 100},
		{"sim-loss", "owner", 10000}, {"sim-fair", "owner", 1000}, {"sim-churn", "owner", 1000},
	} {
		got := sizes[tc.table][tc.design]
		if len(got) == 0 || got[0] != 3 && tc.table != "sim-churn" || got[len(got)-1] != tc.largest {
			t.Errorf("%s %s: sizes %v, want 3 ... %d", tc.table, tc.design, got, tc.largest)
		}
	}
	c := sim.Config{Nodes: 1000, Duration: 5 * time.Second, Seed: 1, MinPerNode: 20, Loss: 0.1, GossipMode: "owner"}
	want := "go run -C cmd/testcluster . sim --nodes 1000 --seconds 5 --seed 1 --min-per-node 20 --loss 0.1 --gossip-mode owner"
	if got := commandOf(c); got != want {
		t.Errorf("commandOf: %q, want %q", got, want)
	}
}

// A table is rewritten between its markers, the rest of the document
// untouched; a document without them is an error.
func TestRewriteBetweenMarkers(t *testing.T) {
	path := filepath.Join(t.TempDir(), "doc.md")
	doc := "intro\n<!-- sim-hot -->\nold\n<!-- /sim-hot -->\nafter\n"
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := rewriteBetweenMarkers(path, map[string]string{"sim-hot": "new\n"}); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(path)
	if string(got) != "intro\n<!-- sim-hot -->\nnew\n<!-- /sim-hot -->\nafter\n" {
		t.Fatalf("rewritten: %q", got)
	}
	if err := rewriteBetweenMarkers(path, map[string]string{"sim-loss": "x"}); err == nil || !strings.Contains(err.Error(), "markers") {
		t.Fatalf("missing markers: %v", err)
	}
}

// A regeneration stopped midway leaves the rows it made, marked
// incomplete; --resume keeps those whose runs are unchanged and runs the
// rest.
func TestReportResumes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "doc.md")
	if err := os.WriteFile(path, []byte("<!-- t -->\n<!-- /t -->\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	runs := []sim.Config{{Nodes: 3, Duration: time.Second, Seed: 1}, owner(sim.Config{Nodes: 4, Duration: time.Second, Seed: 1})}
	tb := reportTable{"t", runs}
	emit := func(table string) error { return rewriteBetweenMarkers(path, map[string]string{"t": table}) }
	stop := func(table string) error {
		if err := emit(table); err != nil {
			return err
		}
		return errStop
	}
	if err := runTable(tb, 10, nil, stop); err != errStop {
		t.Fatalf("stopped after the first row: %v", err)
	}
	doc, _ := os.ReadFile(path)
	if !strings.Contains(string(doc), "**Incomplete**") {
		t.Fatalf("an incomplete table not marked:\n%s", doc)
	}
	done, err := doneRows(path, tb)
	if err != nil || len(done) != 1 || !strings.HasPrefix(done[0], "| 3 | broadcast | direct |") {
		t.Fatalf("rows done: %q, %v", done, err)
	}
	if err := runTable(tb, 10, done, emit); err != nil {
		t.Fatal(err)
	}
	doc, _ = os.ReadFile(path)
	if strings.Contains(string(doc), "**Incomplete**") || !strings.Contains(string(doc), "| 4 | owner | owner |") {
		t.Fatalf("resumed table:\n%s", doc)
	}
	changed := reportTable{"t", []sim.Config{{Nodes: 3, Duration: 2 * time.Second, Seed: 1}}}
	if done, _ := doneRows(path, changed); len(done) != 0 {
		t.Fatalf("rows of a changed run kept: %q", done)
	}
}

var errStop = errors.New("stop")

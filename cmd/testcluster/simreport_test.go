package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/bucket"
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
			if !c.FirstShare { // every sluiced runs with it
				t.Errorf("%s: %d nodes %s without the first share", tb.marker, c.Nodes, d)
			}
			switch {
			case d == "broadcast" && c.FirstContact != bucket.FirstContactToken:
				t.Errorf("%s: broadcast at %d nodes with first contact %s, want token", tb.marker, c.Nodes, c.FirstContact)
			case d == "owner" && c.FirstContact != bucket.FirstContactAuto:
				d += ", " + c.FirstContact.String()
				sizes[tb.marker][d] = append(sizes[tb.marker][d], c.Nodes)
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
		{"sim-hot", "owner, token", 10000}, {"sim-loss", "owner, token", 10000},
	} {
		got := sizes[tc.table][tc.design]
		if len(got) == 0 || got[0] != 3 && tc.table != "sim-churn" || got[len(got)-1] != tc.largest {
			t.Errorf("%s %s: sizes %v, want 3 ... %d", tc.table, tc.design, got, tc.largest)
		}
	}
	c := sim.Config{Nodes: 1000, Duration: 5 * time.Second, Seed: 1, MinPerNode: 20, Loss: 0.1, GossipMode: "owner"}
	for _, tc := range []struct {
		c    sim.Config
		want string
	}{
		{c, "go run -C cmd/testcluster . sim --nodes 1000 --seconds 5 --seed 1 --min-per-node 20 --loss 0.1 --gossip-mode owner"},
		{sluiced(c), "go run -C cmd/testcluster . sim --nodes 1000 --seconds 5 --seed 1 --min-per-node 20 --loss 0.1 --gossip-mode owner --first-share"},
		{tokenContact(c), "go run -C cmd/testcluster . sim --nodes 1000 --seconds 5 --seed 1 --min-per-node 20 --loss 0.1 --gossip-mode owner --first-share --first-contact token"},
	} {
		if got := commandOf(tc.c); got != tc.want {
			t.Errorf("commandOf: %q, want %q", got, tc.want)
		}
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
// rest, but only in tables the stopped regeneration (the newest) wrote.
func TestReportResumes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "doc.md")
	if err := os.WriteFile(path, []byte("<!-- t -->\n<!-- /t -->\n<!-- u -->\n<!-- /u -->\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	runs := []sim.Config{sluiced(sim.Config{Nodes: 3, Duration: time.Second, Seed: 1}), sluiced(owner(sim.Config{Nodes: 4, Duration: time.Second, Seed: 1}))}
	tb, other := reportTable{"t", runs}, reportTable{"u", runs[:1]}
	emit := func(marker string) func(string) error {
		return func(table string) error { return rewriteBetweenMarkers(path, map[string]string{marker: table}) }
	}
	stop := func(table string) error {
		if err := emit("t")(table); err != nil {
			return err
		}
		return errStop
	}
	older, newer := regeneration{id: "2026-11-24T10:00:00Z"}, regeneration{id: "2026-11-24T11:00:00Z"}
	if err := runTable(other, 10, older, nil, emit("u")); err != nil {
		t.Fatal(err)
	}
	if err := runTable(tb, 10, newer, nil, stop); err != errStop {
		t.Fatalf("stopped after the first row: %v", err)
	}
	doc, _ := os.ReadFile(path)
	if !strings.Contains(string(doc), "**Incomplete**") {
		t.Fatalf("an incomplete table not marked:\n%s", doc)
	}
	newest, err := newestRegeneration(path)
	if err != nil || newest != newer.id {
		t.Fatalf("newest regeneration %q, %v; want %q", newest, err, newer.id)
	}
	done, err := keptRows(path, tb, "", newest)
	if err != nil || len(done) != 1 || !strings.HasPrefix(done[commandOf(runs[0])], "| 3 | broadcast | auto | direct |") {
		t.Fatalf("rows done: %q, %v", done, err)
	}
	if kept, _ := keptRows(path, other, "", newest); len(kept) != 0 {
		t.Fatalf("rows of an older regeneration kept: %q", kept)
	}
	if err := runTable(tb, 10, regeneration{id: "2026-11-24T12:00:00Z"}, done, emit("t")); err != nil {
		t.Fatal(err)
	}
	doc, _ = os.ReadFile(path)
	if strings.Contains(string(doc), "**Incomplete**") || !strings.Contains(string(doc), "| 4 | owner | auto | owner |") ||
		!strings.Contains(string(doc), "1 rows kept") {
		t.Fatalf("resumed table:\n%s", doc)
	}
	changed := reportTable{"t", []sim.Config{{Nodes: 3, Duration: 2 * time.Second, Seed: 1}}}
	if done, _ := keptRows(path, changed, "", "2026-11-24T12:00:00Z"); len(done) != 0 {
		t.Fatalf("rows of a changed run kept: %q", done)
	}
}

// --design owner runs the owner rows and keeps the broadcast rows as the
// document holds them.
func TestReportOneDesign(t *testing.T) {
	path := filepath.Join(t.TempDir(), "doc.md")
	if err := os.WriteFile(path, []byte("<!-- t -->\n<!-- /t -->\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	runs := []sim.Config{sluiced(sim.Config{Nodes: 3, Duration: time.Second, Seed: 1}), sluiced(owner(sim.Config{Nodes: 3, Duration: time.Second, Seed: 1}))}
	tb := reportTable{"t", runs}
	emit := func(table string) error { return rewriteBetweenMarkers(path, map[string]string{"t": table}) }
	if err := runTable(tb, 10, regeneration{id: "2026-11-24T10:00:00Z"}, nil, emit); err != nil {
		t.Fatal(err)
	}
	doc, _ := os.ReadFile(path)
	// Mark both rows: the broadcast row must stay, the owner row be made again.
	marked := strings.ReplaceAll(string(doc), "| 3 | broadcast |", "| 3 | broadcast | KEPT")
	marked = strings.ReplaceAll(marked, "| 3 | owner |", "| 3 | owner | STALE")
	if err := os.WriteFile(path, []byte(marked), 0o644); err != nil {
		t.Fatal(err)
	}
	kept, err := keptRows(path, tb, "owner", "")
	if err != nil || len(kept) != 1 {
		t.Fatalf("kept %q, %v; want the broadcast row", kept, err)
	}
	if err := runTable(tb, 10, regeneration{id: "2026-11-24T11:00:00Z", design: "owner"}, kept, emit); err != nil {
		t.Fatal(err)
	}
	doc, _ = os.ReadFile(path)
	for _, want := range []string{"| 3 | broadcast | KEPT", "| 3 | owner | auto | owner |", "of the owner rows only", "1 rows kept"} {
		if !strings.Contains(string(doc), want) {
			t.Errorf("no %q in:\n%s", want, doc)
		}
	}
	if strings.Contains(string(doc), "STALE") {
		t.Errorf("the owner row kept:\n%s", doc)
	}
}

// The goals table reads the rows back as writeRow wrote them.
func TestGoalsFromRows(t *testing.T) {
	hot := "| 1000 | owner | share | owner | 0% | 601 / 600 (100%) | 200 | +6 (0.1 bursts) | 20 / 33 ms; 16/16, 16 within (5 holders) | 28% | 99 B | 2 | 2403 | 0.01% | 0.23, 47 MB |\n"
	over := "| 3000 | owner | token | owner | 0% | 2999 / 600 (500%) | 2999 | +2799 (28.0 bursts) | 20 / 45 ms; 16/16, 10 within (5 holders) | 28% | 99 B | 2 | 2403 | 0.01% | 0.23, 47 MB |\n"
	churn := "| 50 | owner | token | owner | 0%, churn 1%/min (1 replaced) | 12099 / 12100 (100%) | 197 | +0 (0.0 bursts) | 20 / 37 ms; 489/490, 489 within (5 holders) | 3% | 831 B | 15 | 573 | 0.02% | 0.01, 5 MB |\n"
	var rows []goalRow
	for _, line := range []string{hot, over, churn} {
		g, ok := parseGoalRow(line)
		if !ok {
			t.Fatalf("not parsed: %s", line)
		}
		rows = append(rows, g)
	}
	if g := rows[1]; g.n != 3000 || g.admitted != 2999 || g.bursts != 28 || g.p99 != 45 || g.in != 10 || g.bytes != 99 || g.packets != 2 {
		t.Fatalf("parsed %+v", g)
	}
	if rows[2].loss != "churn 1%/min" {
		t.Fatalf("churn parsed as %q", rows[2].loss)
	}
	var spread []goalRow
	for _, line := range []string{
		"| 50 | owner | token | owner | 0% | 12500 / 30000 (42%) | 0 | +0 (0.0 bursts) | 18 / 31 ms; 13/13, 13 within (5 holders) | - | 74.8 kB | 1044 | 2317 | 1.59% | 0.29, 10 MB |\n",
		"| 10000 | owner | token | owner | 0% | 999940 / 3000000 (33%) | 0 | +0 (0.0 bursts) | 17 / 27 ms; 5/5, 5 within (5 holders) | - | 110.3 kB | 1744 | 10872 | 3.94% | 247.61, 1152 MB |\n",
	} {
		g, ok := parseGoalRow(line)
		if !ok {
			t.Fatalf("not parsed: %s", line)
		}
		spread = append(spread, g)
	}
	table := goalsTable(map[string][]goalRow{"sim-hot": rows[:2], "sim-churn": rows[2:], "sim-spread": spread})
	for _, want := range []string{
		"| goal: design, first contact | N = 50 | N = 1000 | N = 3000 | N = 10000 |",
		"| 2. per-node cost (spread load): owner, first contact token | 74.8 kB/s, 1044 pkt/s | not run | not run | 110.3 kB/s, 1744 pkt/s (of 50: bytes ×1.47, packets ×1.67, est. CPU ×2.48): bytes and packets met, **est. CPU not met** |",
		"| 1. overshoot (hot key): owner, first contact share | not run | 100.2%, worst 1 s +0.1 bursts: met | not run | not run |",
		"| 1. overshoot (hot key): owner, first contact token | not run | not run | 499.8%, worst 1 s +28.0 bursts: **not met** | not run |",
		"3. convergence p99 (hot key): owner, first contact token | not run | not run | 45 ms, 10 of 16 within: **not met** | not run |",
		"| 4. churn 1%/min: owner, first contact token | 100.0%: met | not run | not run | not run |",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("no %q in\n%s", want, table)
		}
	}
}

// The estimated CPU is compared only between rows whose estimates were
// made alike: both on the syncer replayed alone (writeRow's "syncer
// alone"), or both on the syncer timed in the simulation (older rows).
func TestGoalsCompareLikeEstimates(t *testing.T) {
	row := func(n int, cpu string) goalRow {
		t.Helper()
		g, ok := parseGoalRow(fmt.Sprintf("| %d | owner | auto | owner | 0%% | 12500 / 30000 (42%%) | 0 | +0 (0.0 bursts) | 18 / 31 ms; 13/13, 13 within (5 holders) | - | 74.8 kB | 1044 | 2317 | %s | 0.29, 10 MB |\n", n, cpu))
		if !ok {
			t.Fatalf("not parsed: %s", cpu)
		}
		return g
	}
	alone50, alone1000 := row(50, "1.40% (syncer alone 0.35%, in the sim 0.47%)"), row(1000, "2.52% (syncer alone 0.80%, in the sim 1.70%)")
	if alone50.cpu != 1.40 || !alone50.cpuAlone || row(50, "1.54%").cpuAlone {
		t.Fatalf("parsed %+v", alone50)
	}
	for _, tc := range []struct {
		name     string
		a, b     goalRow
		want     string
		wantNone string
	}{
		{"both alone", alone50, alone1000, "est. CPU ×1.80): met", ""},
		{"both in the sim", row(50, "1.54%"), row(1000, "3.33%"), "est. CPU ×2.16): bytes and packets met, **est. CPU not met**", ""},
		{"mixed", row(50, "1.54%"), alone1000, "est. CPU not compared: the rows' estimates were made differently): met", "×1.64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			table := goalsTable(map[string][]goalRow{"sim-spread": {tc.a, tc.b}})
			if !strings.Contains(table, tc.want) || (tc.wantNone != "" && strings.Contains(table, tc.wantNone)) {
				t.Fatalf("want %q in\n%s", tc.want, table)
			}
		})
	}
}

var errStop = errors.New("stop")

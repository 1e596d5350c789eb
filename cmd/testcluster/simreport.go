package main

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/sluicelabs/sluice/bucket"
	"github.com/sluicelabs/sluice/testcluster/sim"
)

// The simulated tables of docs/SCALING.md: each a set of runs of both
// designs, "broadcast" (every node hears every update: direct fan-out up to
// the fan-out limit, relayed above, the design before issue 20, forced with
// --gossip-mode relay) and "owner" (--gossip-mode owner; auto's choice above
// the fan-out limit), rewritten between the table's markers once its runs
// are done. Every run is what sluiced runs: the first-contact hold, the fair
// floor and, in owner mode, the shares of the owner's view (--first-share),
// with sluiced's default --first-contact auto (owner rows); where first
// contact decides the figures (hot key, loss), owner mode also with
// --first-contact token. Broadcast's rows run with token.

// simReport runs the tables asked for (all by default) up to --max-nodes
// and rewrites each in the document as soon as its runs finish; then the
// goals at a glance, from the tables as the document holds them.
func simReport(c *cli.Context) error {
	maxNodes, err := strconv.Atoi(c.String("max-nodes"))
	if err != nil {
		return fmt.Errorf("--max-nodes: %w", err)
	}
	only := c.StringSlice("tables")
	for _, name := range only {
		if !slices.ContainsFunc(reportTables, func(t reportTable) bool { return t.marker == name }) {
			return fmt.Errorf("--tables: no table %q", name)
		}
	}
	design := c.String("design")
	if design != "" && design != "owner" && design != "broadcast" {
		return fmt.Errorf("--design %q: want owner or broadcast", design)
	}
	path := c.String("doc")
	start := time.Now()
	regen := regeneration{id: start.UTC().Format(time.RFC3339), design: design}
	var newest string
	if c.Bool("resume") {
		if newest, err = newestRegeneration(path); err != nil {
			return err
		}
	}
	for _, t := range reportTables {
		if len(only) > 0 && !slices.Contains(only, t.marker) {
			continue
		}
		kept, err := keptRows(path, t, design, newest)
		if err != nil {
			return err
		}
		err = runTable(t, maxNodes, regen, kept, func(table string) error {
			return rewriteBetweenMarkers(path, map[string]string{t.marker: table})
		})
		if err != nil {
			return err
		}
		if err := writeGoals(path); err != nil {
			return err
		}
	}
	fmt.Fprintf(os.Stderr, "report: %s wall\n", time.Since(start).Round(time.Second))
	return nil
}

// regeneration names one --report run in the tables it writes (so that
// --resume keeps only the rows of the regeneration that stopped) and the
// design it regenerates ("" for both).
type regeneration struct {
	id, design string
}

// runTable runs one table's rows up to maxNodes, but for those kept (by
// command: rows of an earlier regeneration, see keptRows), and hands emit
// the table after each row (so that a regeneration stopped midway leaves
// the rows done, and those it keeps, marked so): the rows, then how to
// regenerate it, its wall and CPU time, and each row's own command.
func runTable(t reportTable, maxNodes int, regen regeneration, kept map[string]string, emit func(string) error) error {
	type slot struct {
		cfg      sim.Config
		cmd, row string
		run      bool // to be run by this regeneration
	}
	var slots []slot
	var skipped []string
	for _, run := range t.runs {
		if run.Nodes > maxNodes {
			skipped = append(skipped, strconv.Itoa(run.Nodes))
			continue
		}
		cmd := commandOf(run)
		row, ok := kept[cmd]
		slots = append(slots, slot{cfg: run, cmd: cmd, row: row, run: !ok})
	}
	start := time.Now()
	var cpu time.Duration
	ran := 0
	for k := range slots {
		if slots[k].run {
			s, err := sim.New(slots[k].cfg)
			if err != nil {
				return fmt.Errorf("report %s: %w", t.marker, err)
			}
			r := s.Run()
			r.Write(os.Stderr)
			cpu += r.CPU
			var row strings.Builder
			writeRow(&row, r, slots[k].cfg)
			slots[k].row, slots[k].run = row.String(), false
			ran++
		}
		var b, cmds strings.Builder
		b.WriteString(reportHeader)
		missing := 0
		for _, sl := range slots {
			if sl.run {
				missing++
				continue
			}
			b.WriteString(sl.row)
			fmt.Fprintf(&cmds, "    %s\n", sl.cmd)
		}
		if missing > 0 {
			fmt.Fprintf(&b, "\n**Incomplete**: this regeneration stopped (or is still running); %d rows not run yet.", missing)
		}
		keptN := 0
		for _, sl := range slots {
			if _, ok := kept[sl.cmd]; ok {
				keptN++
			}
		}
		fmt.Fprintf(&b, "\nSeed 1. This table: `go run -C cmd/testcluster . sim --report --tables %s` (%s; %d rows run in %s of wall time here, %s of the simulator's CPU",
			t.marker, regen.describe(), ran, time.Since(start).Round(time.Second), cpu.Round(time.Second))
		if keptN > 0 {
			fmt.Fprintf(&b, "; %d rows kept from an earlier regeneration", keptN)
		}
		if len(skipped) > 0 {
			fmt.Fprintf(&b, "; rows of N = %s not run (above --max-nodes)", strings.Join(skipped, ", "))
		}
		b.WriteString("). Each row alone:\n\n")
		b.WriteString(cmds.String())
		if err := emit(b.String()); err != nil {
			return err
		}
	}
	return nil
}

// describe names the regeneration in a table's note: "regeneration ID",
// and which design's rows it ran if not both.
func (r regeneration) describe() string {
	if r.design == "" {
		return "regeneration " + r.id
	}
	return fmt.Sprintf("regeneration %s of the %s rows only", r.id, r.design)
}

type reportTable struct {
	marker string
	runs   []sim.Config
}

// designOf names a run's design for the tables (and --design).
func designOf(c sim.Config) string {
	if c.GossipMode == "owner" {
		return "owner"
	}
	return "broadcast"
}

// broadcast is a run of the design before issue 20 at n nodes: direct
// fan-out up to the fan-out limit (64), relayed above.
func broadcast(c sim.Config) sim.Config {
	if c.Nodes > 64 {
		c.GossipMode = "relay"
	}
	return c
}

func owner(c sim.Config) sim.Config {
	c.GossipMode = "owner"
	return c
}

// asSluiced runs c as sluiced does: the first-contact hold, the fair floor
// and, in owner mode, the owner's views (daemon.Config.NoFirstShare is
// false in every sluiced), first contact as given (sluiced's default:
// auto).
func asSluiced(c sim.Config, contact bucket.FirstContact) sim.Config {
	c.FirstShare, c.FirstContact = true, contact
	return c
}

// sluiced is c as sluiced runs it by default (--first-contact auto).
func sluiced(c sim.Config) sim.Config { return asSluiced(c, bucket.FirstContactAuto) }

// tokenContact is c as sluiced runs it with --first-contact token (the
// default before auto; broadcast's rows run with it: in direct and relayed
// gossip no owner reports a crowd, so auto counts as share there).
func tokenContact(c sim.Config) sim.Config { return asSluiced(c, bucket.FirstContactToken) }

// reportTables are SCALING.md's simulated tables: the limit 100/s burst
// 100, 20 ms gossip, seed 1, defaults otherwise. Broadcast stops where its
// runs stop being affordable here (its simulated work grows as N²: see
// SCALING.md); owner mode goes to 10,000.
var reportTables = func() []reportTable {
	secs := func(n int) time.Duration {
		if n >= 1000 {
			return 5 * time.Second
		}
		return 10 * time.Second
	}
	hotOf := func(n int) sim.Config { return sim.Config{Nodes: n, Duration: secs(n), Seed: 1, MinPerNode: 20} }
	// Broadcast's largest run: 3 s at 2,000 nodes (45 CPU s per simulated
	// second here).
	big := func(c sim.Config) sim.Config {
		if c.Nodes >= 2000 {
			c.Duration = 3 * time.Second
		}
		return c
	}
	var hot, lossy, churn, fair, spread []sim.Config
	for _, n := range []int{3, 10, 50, 100, 1000, 2000, 3000, 10000} {
		if n <= 2000 {
			hot = append(hot, tokenContact(big(broadcast(hotOf(n)))))
		}
		if n != 2000 {
			hot = append(hot, sluiced(owner(hotOf(n))), tokenContact(owner(hotOf(n))))
		}
	}
	for _, n := range []int{3, 10, 50, 100, 1000, 10000} {
		for _, loss := range []float64{0.1, 0.3} {
			c := hotOf(n)
			c.Loss = loss
			if n <= 1000 {
				lossy = append(lossy, tokenContact(broadcast(c)))
			}
			lossy = append(lossy, sluiced(owner(c)), tokenContact(owner(c)))
		}
	}
	for _, n := range []int{50, 100, 1000} {
		for _, perMinute := range []float64{0.01, 0.1} {
			c := sim.Config{Nodes: n, Duration: 2 * time.Minute, Seed: 1, MinPerNode: 20, ChurnPerMinute: perMinute}
			if n <= 100 {
				churn = append(churn, tokenContact(broadcast(c)))
			}
			churn = append(churn, sluiced(owner(c)))
		}
	}
	for _, n := range []int{3, 10, 50, 100, 1000} {
		// The limit grows with N, so that a node's fair share of a 2 s
		// window is 100 requests: shares are measurable at every size.
		c := sim.Config{Nodes: n, Duration: secs(n), Seed: 1, Rate: 50 * float64(n)}
		if n <= 100 {
			fair = append(fair, tokenContact(broadcast(c)))
		}
		fair = append(fair, sluiced(owner(c)))
	}
	for _, n := range []int{3, 10, 50, 100, 1000, 3000, 10000} {
		// Short runs: relayed at 100 nodes costs 18-32 CPU s per
		// simulated second. Not shorter than 2 s: owner mode answers a
		// node about the keys it used in the last 2 s, so its per-node
		// cost climbs for 2 s before it is steady.
		d := 5 * time.Second
		if n >= 100 {
			d = 2 * time.Second
		}
		c := sim.Config{Nodes: n, Duration: d, Seed: 1, Scenario: sim.Spread}
		if n <= 100 {
			spread = append(spread, tokenContact(broadcast(c)))
		}
		spread = append(spread, sluiced(owner(c)))
	}
	return []reportTable{{"sim-hot", hot}, {"sim-loss", lossy}, {"sim-churn", churn}, {"sim-fair", fair}, {"sim-spread", spread}}
}()

// commandOf is the command that makes one run alone.
func commandOf(c sim.Config) string {
	var b strings.Builder
	fmt.Fprintf(&b, "go run -C cmd/testcluster . sim --nodes %d --seconds %g --seed %d", c.Nodes, c.Duration.Seconds(), c.Seed)
	if c.Scenario != "" && c.Scenario != sim.Hot {
		fmt.Fprintf(&b, " --scenario %s", c.Scenario)
	}
	if c.Rate != 0 {
		fmt.Fprintf(&b, " --rate %g", c.Rate)
	}
	if c.MinPerNode != 0 {
		fmt.Fprintf(&b, " --min-per-node %g", c.MinPerNode)
	}
	if c.Loss != 0 {
		fmt.Fprintf(&b, " --loss %g", c.Loss)
	}
	if c.ChurnPerMinute != 0 {
		fmt.Fprintf(&b, " --churn %g", c.ChurnPerMinute)
	}
	if c.GossipMode != "" {
		fmt.Fprintf(&b, " --gossip-mode %s", c.GossipMode)
	}
	if c.FirstShare {
		b.WriteString(" --first-share")
		if c.FirstContact != bucket.FirstContactAuto {
			fmt.Fprintf(&b, " --first-contact %s", c.FirstContact)
		}
	}
	return b.String()
}

const reportHeader = "| N | design | first contact | mode | loss | admitted / allowed | first second | worst 1 s window over burst + rate | convergence p50 / p99; probes converged, within 2 intervals + a round trip | fair 2 s shares (±25%) | per node: bytes/s sent | packets/s sent | busiest node: packets/s sent | est. CPU per node | sim: CPU s per simulated s, heap |\n" +
	"| ---: | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n"

func writeRow(b *strings.Builder, r *sim.Report, c sim.Config) {
	fair := "-"
	if r.Fairness.Windows > 0 {
		fair = fmt.Sprintf("%.0f%%", 100*r.Fairness.Within25)
	}
	cv := r.Convergence
	conv := fmt.Sprintf("none of %d", cv.Probes)
	if cv.Converged > 0 {
		conv = fmt.Sprintf("%.0f / %.0f ms; %d/%d, %d within", cv.P50, cv.P99, cv.Converged, cv.Probes, cv.WithinBound)
	}
	if cv.Holders > 0 {
		conv += fmt.Sprintf(" (%d holders)", cv.Holders)
	}
	loss := fmt.Sprintf("%.0f%%", 100*r.Loss)
	if r.Churn > 0 {
		loss += fmt.Sprintf(", churn %g%%/min (%d replaced)", 100*r.Churn, r.Replaced)
	}
	contact := "off"
	if c.FirstShare {
		contact = c.FirstContact.String()
	}
	cpu := fmt.Sprintf("%.2f%%", 100*r.EstimatedCPU)
	if r.IsolatedCPU > 0 {
		cpu += fmt.Sprintf(" (syncer alone %.2f%%, in the sim %.2f%%)", 100*r.IsolatedCPU, 100*r.SyncerCPU)
	}
	fmt.Fprintf(b, "| %d | %s | %s | %s | %s | %d / %.0f (%.0f%%) | %d | %+.0f (%.1f bursts) | %s | %s | %s | %.0f | %.0f | %s | %.2f, %.0f MB |\n",
		r.Nodes, designOf(c), contact, r.Mode, loss, r.Admitted, r.Allowed, 100*r.Accuracy, r.FirstSecond, r.WorstWindow, r.WorstBursts,
		conv, fair, human(r.PerNode.BytesSent), r.PerNode.PacketsSent, r.PerNodeMax.PacketsSent, cpu,
		r.CPU.Seconds()/r.Seconds, float64(r.Heap)/(1<<20))
}

func human(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.1f MB", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.1f kB", v/1e3)
	}
	return fmt.Sprintf("%.0f B", v)
}

// keptRows returns the rows of table t in the document at path that this
// regeneration keeps, by their commands (listed under the table, in the
// rows' order; only commands that are still some run's own: the rows of a
// changed run are made again): with design set, every row of the other
// design; with resume (newest, the newest regeneration in the document),
// the rows that regeneration made or kept, if it made this table.
func keptRows(path string, t reportTable, design, newest string) (map[string]string, error) {
	kept := map[string]string{}
	if design == "" && newest == "" {
		return kept, nil
	}
	rows, cmds, note, err := tableRows(path, t.marker)
	if err != nil {
		return nil, err
	}
	resumed := newest != "" && strings.Contains(note, "regeneration "+newest)
	ours := map[string]sim.Config{}
	for _, run := range t.runs {
		ours[commandOf(run)] = run
	}
	for k := 0; k < len(rows) && k < len(cmds); k++ {
		run, ok := ours[cmds[k]]
		if !ok {
			continue
		}
		if resumed || design != "" && designOf(run) != design {
			kept[cmds[k]] = rows[k]
		}
	}
	return kept, nil
}

// tableRows reads the table between marker's markers in the document at
// path: its rows (with their newline), the commands listed under it, and
// its note. A table of another format has no rows.
func tableRows(path, marker string) (rows, cmds []string, note string, err error) {
	doc, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, "", fmt.Errorf("read the tables: %w", err)
	}
	text := string(doc)
	open, end := "<!-- "+marker+" -->\n", "<!-- /"+marker+" -->"
	i, j := strings.Index(text, open), strings.Index(text, end)
	if i < 0 || j < i {
		return nil, nil, "", nil
	}
	if !strings.HasPrefix(text[i+len(open):], reportHeader) {
		return nil, nil, "", nil // another format: every row is made again
	}
	for n, line := range strings.Split(text[i+len(open):j], "\n") {
		switch {
		case strings.HasPrefix(line, "| ") && n >= 2: // below the header and its rule
			rows = append(rows, line+"\n")
		case strings.HasPrefix(line, "    go run "):
			cmds = append(cmds, strings.TrimPrefix(line, "    "))
		case strings.HasPrefix(line, "Seed 1. This table"):
			note = line
		}
	}
	return rows, cmds, note, nil
}

// regenerationID finds the regenerations named in the tables' notes.
var regenerationID = regexp.MustCompile(`regeneration (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)`)

// newestRegeneration is the newest regeneration named in the document at
// path: the one a --resume continues ("" if none).
func newestRegeneration(path string) (string, error) {
	doc, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("resume the tables: %w", err)
	}
	newest := ""
	for _, m := range regenerationID.FindAllStringSubmatch(string(doc), -1) {
		newest = max(newest, m[1]) // RFC 3339 in UTC sorts as time
	}
	return newest, nil
}

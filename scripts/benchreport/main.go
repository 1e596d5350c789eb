// Command benchreport turns the raw benchmark output scripts/bench.sh saves
// into docs/BENCHMARKS.md: tables, ratios against the anchors measured in the
// same run, the goals checked one by one, and SVG charts.
//
//	go run -C scripts ./benchreport -raw ../docs/benchmarks/raw -out ../docs/BENCHMARKS.md
//
// Every input file is optional: a section whose benchmarks were not run says
// so and names the command that runs them.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

func main() {
	raw := flag.String("raw", "docs/benchmarks/raw", "directory of raw benchmark output (env.txt, bucket.txt, scaling.txt, ipc.txt, cluster.txt, benchstat.txt, rls.md)")
	out := flag.String("out", "docs/BENCHMARKS.md", "report to write")
	charts := flag.String("charts", "docs/benchmarks", "directory for the charts, linked from the report")
	pngDir := flag.String("png", "", "also write PNG copies of the charts here")
	flag.Parse()
	if err := run(*raw, *out, *charts, *pngDir); err != nil {
		fmt.Fprintln(os.Stderr, "benchreport:", err)
		os.Exit(1)
	}
}

// inputs are the raw files, parsed.
type inputs struct {
	env      string
	bucket   results // in-process, at the machine's GOMAXPROCS
	scaling  results // the parallel store at GOMAXPROCS 1, 2, ...
	ipc      results // through the daemon's socket, and the daemon process
	cluster  results // testcluster
	stat     string  // benchstat's comparison of the in-process runs
	rls      string  // scripts/bench-rls.sh's tables (markdown), if it ran
	chartDir string  // where charts go
	pngDir   string  // if set, PNG copies of the charts go here
	chartRel string  // the chart directory relative to the report
}

func run(rawDir, out, chartDir, pngDir string) error {
	in := inputs{chartDir: chartDir, pngDir: pngDir}
	rel, err := filepath.Rel(filepath.Dir(out), chartDir)
	if err != nil {
		return fmt.Errorf("charts directory: %w", err)
	}
	in.chartRel = filepath.ToSlash(rel)
	read := func(name string) ([]byte, bool, error) {
		b, err := os.ReadFile(filepath.Join(rawDir, name))
		if os.IsNotExist(err) {
			return nil, false, nil
		}
		return b, err == nil, err
	}
	for _, f := range []struct {
		name string
		into *results
	}{{"bucket.txt", &in.bucket}, {"scaling.txt", &in.scaling}, {"ipc.txt", &in.ipc}, {"cluster.txt", &in.cluster}} {
		b, ok, err := read(f.name)
		if err != nil {
			return err
		}
		if ok {
			if err := parse(bytes.NewReader(b), f.into); err != nil {
				return fmt.Errorf("%s: %w", f.name, err)
			}
		}
	}
	if b, ok, err := read("env.txt"); err != nil {
		return err
	} else if ok {
		in.env = strings.TrimSpace(string(b))
	}
	if b, ok, err := read("benchstat.txt"); err != nil {
		return err
	} else if ok {
		in.stat = strings.TrimSpace(string(b))
	}
	if b, ok, err := read("rls.md"); err != nil {
		return err
	} else if ok {
		in.rls = strings.TrimSpace(string(b))
	}
	if err := os.MkdirAll(chartDir, 0o755); err != nil {
		return err
	}
	var w bytes.Buffer
	if err := report(&w, &in); err != nil {
		return err
	}
	return os.WriteFile(out, w.Bytes(), 0o644)
}

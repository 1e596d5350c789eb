// Command algoreport drives every bucket algorithm through the same loads on
// a fake clock (a real run of package bucket, deterministic) and writes what
// docs/ALGORITHMS.md shows: a chart and a CSV of every request's outcome per
// scenario, a chart of the buckets shaping a burst, and, on standard output,
// a markdown table per scenario.
//
//	go run -C scripts ./algoreport -out ../docs/algorithms
package main

import (
	"encoding/csv"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sluicelabs/sluice/bucket"
)

func main() {
	out := flag.String("out", "docs/algorithms", "directory for the charts and CSVs")
	flag.Parse()
	if err := run(*out, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "algoreport:", err)
		os.Exit(1)
	}
}

// The shaping case: this many requests at once, each willing to wait this long.
const (
	shapingRequests = 20
	shapingMaxWait  = 2 * time.Second
)

// shaping is one bucket answering the shaping case with Reserve.
type shaping struct {
	algo bucket.Algorithm
	outs []outcome
}

func run(dir string, w io.Writer) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	for _, sc := range scenarios() {
		var runs []trace
		for _, a := range bucket.Algorithms() {
			outs, err := simulate(a, sc.arrivals, 0)
			if err != nil {
				return fmt.Errorf("scenario %s: %w", sc.name, err)
			}
			runs = append(runs, trace{outs: outs, sum: summarise(a, outs)})
		}
		if err := scenarioChart(filepath.Join(dir, sc.name+".svg"), sc, runs); err != nil {
			return fmt.Errorf("scenario %s: chart: %w", sc.name, err)
		}
		if err := writeOutcomes(filepath.Join(dir, sc.name+".csv"), runs); err != nil {
			return fmt.Errorf("scenario %s: %w", sc.name, err)
		}
		printTable(w, sc, runs)
	}

	burst := make([]time.Duration, shapingRequests)
	var sims []shaping
	for _, a := range []bucket.Algorithm{bucket.AlgoTokenBucket, bucket.AlgoLeakyBucket} {
		outs, err := simulate(a, burst, shapingMaxWait)
		if err != nil {
			return fmt.Errorf("shaping: %w", err)
		}
		sims = append(sims, shaping{a, outs})
	}
	if err := shapingChart(filepath.Join(dir, "shaping.svg"), shapingRequests, shapingMaxWait, sims); err != nil {
		return fmt.Errorf("shaping: chart: %w", err)
	}
	if err := writeShaping(filepath.Join(dir, "shaping.csv"), sims); err != nil {
		return fmt.Errorf("shaping: %w", err)
	}
	printShaping(w, sims)
	return nil
}

// seconds formats a duration as seconds to the microsecond.
func seconds(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', 6, 64) }

func writeOutcomes(path string, runs []trace) error {
	rows := [][]string{{"algorithm", "request", "at_s", "outcome"}}
	for _, r := range runs {
		for i, o := range r.outs {
			rows = append(rows, []string{r.sum.algo.String(), strconv.Itoa(i + 1), seconds(o.at), verdict(o.allowed)})
		}
	}
	return writeCSV(path, rows)
}

func writeShaping(path string, sims []shaping) error {
	rows := [][]string{{"algorithm", "request", "arrival_s", "outcome", "departure_s"}}
	for _, s := range sims {
		for i, o := range s.outs {
			dep := ""
			if o.allowed {
				dep = seconds(o.at + o.wait)
			}
			rows = append(rows, []string{s.algo.String(), strconv.Itoa(i + 1), seconds(o.at), verdict(o.allowed), dep})
		}
	}
	return writeCSV(path, rows)
}

func verdict(allowed bool) string {
	if allowed {
		return "admitted"
	}
	return "refused"
}

func writeCSV(path string, rows [][]string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	cw := csv.NewWriter(f)
	cw.WriteAll(rows) // flushes
	if err := cw.Error(); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return f.Close()
}

func printTable(w io.Writer, sc scenario, runs []trace) {
	fmt.Fprintf(w, "### %s: %s (%d requests)\n\n", sc.name, sc.about, len(sc.arrivals))
	fmt.Fprintln(w, "| algorithm | admitted | refused | max in any rolling 1 s | longest gap between admissions |")
	fmt.Fprintln(w, "| --- | ---: | ---: | ---: | ---: |")
	for _, r := range runs {
		s := r.sum
		fmt.Fprintf(w, "| %s | %d | %d | %d | %.3f s |\n", s.algo, s.admitted, s.refused, s.maxPerPeriod, s.longestGap.Seconds())
	}
	fmt.Fprintln(w)
}

func printShaping(w io.Writer, sims []shaping) {
	fmt.Fprintf(w, "### shaping: %d requests at once, Reserve with maxWait %s\n\n", shapingRequests, shapingMaxWait)
	fmt.Fprintln(w, "| algorithm | go ahead | refused | when they go ahead (s) |")
	fmt.Fprintln(w, "| --- | ---: | ---: | --- |")
	for _, s := range sims {
		var deps []string
		for _, o := range s.outs {
			if o.allowed {
				deps = append(deps, strconv.FormatFloat((o.at+o.wait).Seconds(), 'f', -1, 64))
			}
		}
		fmt.Fprintf(w, "| %s | %d | %d | %s |\n", s.algo, len(deps), len(s.outs)-len(deps), strings.Join(deps, ", "))
	}
	fmt.Fprintln(w)
}

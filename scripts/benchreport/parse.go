package main

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// result is one benchmark (one name, one GOMAXPROCS) with every run's
// metrics, as `go test -bench` prints them.
type result struct {
	family  string            // "Store" for BenchmarkStore/...
	params  map[string]string // "keys" → "100000", from key=value name parts
	order   []string          // param keys in name order
	procs   int               // the -N suffix; 1 when absent
	metrics map[string][]float64
	units   []string // metric units in first-seen order
}

// value is the median of a metric over the runs, and whether it was measured.
func (r *result) value(unit string) (float64, bool) {
	v := slices.Clone(r.metrics[unit])
	if len(v) == 0 {
		return 0, false
	}
	sort.Float64s(v)
	if len(v)%2 == 1 {
		return v[len(v)/2], true
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2, true
}

func (r *result) param(k string) string { return r.params[k] }

// results holds benchmark results in the order first seen.
type results struct {
	list   []*result
	byName map[string]*result
}

// parse reads `go test -bench` output; lines that are not results are skipped.
func parse(rd io.Reader, into *results) error {
	if into.byName == nil {
		into.byName = map[string]*result{}
	}
	sc := bufio.NewScanner(rd)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") || len(f)%2 != 0 {
			continue
		}
		if _, err := strconv.Atoi(f[1]); err != nil {
			continue
		}
		name := f[0]
		r := into.byName[name]
		if r == nil {
			r = newResult(name)
			into.byName[name] = r
			into.list = append(into.list, r)
		}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return fmt.Errorf("benchmark %s: metric %q: %w", name, f[i+1], err)
			}
			unit := f[i+1]
			if _, seen := r.metrics[unit]; !seen {
				r.units = append(r.units, unit)
			}
			r.metrics[unit] = append(r.metrics[unit], v)
		}
	}
	return sc.Err()
}

func newResult(name string) *result {
	r := &result{params: map[string]string{}, metrics: map[string][]float64{}, procs: 1}
	name = strings.TrimPrefix(name, "Benchmark")
	if i := strings.LastIndexByte(name, '-'); i > 0 {
		if p, err := strconv.Atoi(name[i+1:]); err == nil {
			r.procs, name = p, name[:i]
		}
	}
	parts := strings.Split(name, "/")
	r.family = parts[0]
	for _, p := range parts[1:] {
		k, v, ok := strings.Cut(p, "=")
		if !ok {
			k, v = "case", p
		}
		r.params[k] = v
		r.order = append(r.order, k)
	}
	return r
}

// find returns the results of a family whose params include want (and, if
// procs > 0, run at that GOMAXPROCS).
func (rs *results) find(family string, procs int, want map[string]string) []*result {
	var out []*result
next:
	for _, r := range rs.list {
		if r.family != family || (procs > 0 && r.procs != procs) {
			continue
		}
		for k, v := range want {
			if r.params[k] != v {
				continue next
			}
		}
		out = append(out, r)
	}
	return out
}

// one is find for a single result; nil when there is none.
func (rs *results) one(family string, procs int, want map[string]string) *result {
	if f := rs.find(family, procs, want); len(f) > 0 {
		return f[0]
	}
	return nil
}

// maxProcs is the highest GOMAXPROCS a family was run at (the default run).
func (rs *results) maxProcs(family string) int {
	m := 0
	for _, r := range rs.list {
		if r.family == family {
			m = max(m, r.procs)
		}
	}
	return m
}

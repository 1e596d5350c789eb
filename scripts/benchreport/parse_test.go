package main

import (
	"strings"
	"testing"
)

func TestParseBenchmarkOutput(t *testing.T) {
	const out = `goos: linux
BenchmarkStore/keys=100000/impl=sluice/mode=serial-2   	 5238680	       216.3 ns/op	       0 B/op	       0 allocs/op
BenchmarkStore/keys=100000/impl=sluice/mode=serial-2   	 5406538	       213.9 ns/op	       0 B/op	       0 allocs/op
BenchmarkStore/keys=100000/impl=sluice/mode=serial-2   	 5423770	       220.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkStore/keys=100000/impl=sluice/mode=parallel   	 8641042	       180.0 ns/op
BenchmarkRoundTrip/callers=1/impl=sluice-2         	   50000	     11171 ns/op	     89517 decisions/s	        10.30 p50-µs
BenchmarkNoParams-8	100	5 ns/op
PASS
ok  	github.com/sluicelabs/sluice/bucket	64.897s
`
	var rs results
	if err := parse(strings.NewReader(out), &rs); err != nil {
		t.Fatal(err)
	}
	if len(rs.list) != 4 {
		t.Fatalf("parsed %d benchmarks, want 4", len(rs.list))
	}
	for _, c := range []struct {
		family string
		procs  int
		params map[string]string
		unit   string
		want   float64
	}{
		{"Store", 2, map[string]string{"keys": "100000", "mode": "serial"}, "ns/op", 216.3}, // median of three
		{"Store", 1, map[string]string{"mode": "parallel"}, "ns/op", 180},                   // no -N suffix: GOMAXPROCS 1
		{"RoundTrip", 2, map[string]string{"callers": "1"}, "p50-µs", 10.3},
		{"NoParams", 8, nil, "ns/op", 5},
	} {
		r := rs.one(c.family, c.procs, c.params)
		if r == nil {
			t.Errorf("%s at %d procs with %v: not found", c.family, c.procs, c.params)
			continue
		}
		if got, ok := r.value(c.unit); !ok || got != c.want {
			t.Errorf("%s %v %s = %v (%v), want %v", c.family, c.params, c.unit, got, ok, c.want)
		}
	}
	if got := rs.maxProcs("Store"); got != 2 {
		t.Errorf("maxProcs(Store) = %d, want 2", got)
	}
	if err := parse(strings.NewReader("BenchmarkX-2 10 abc ns/op\n"), &rs); err == nil {
		t.Error("a malformed metric was accepted")
	}
}

func TestNumberFormats(t *testing.T) {
	for _, c := range []struct {
		v    float64
		want string
	}{{0, "0"}, {0.5, "0.50"}, {27.38, "27.4"}, {216.3, "216"}, {12345, "12,345"}, {1234567, "1.23M"}, {-12345, "-12,345"}} {
		if got := num(c.v); got != c.want {
			t.Errorf("num(%v) = %q, want %q", c.v, got, c.want)
		}
	}
}

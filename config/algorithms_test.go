package config

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/bucket"
)

func TestRulesNameAlgorithmsAndSeveralLimits(t *testing.T) {
	src := `
rules:
  plain:
    rate: 10/1s
  paced:
    rate: 10/1s
    burst: 5
    algorithm: gcra
  daily:
    rate: 1000/1d
    algorithm: fixed_window
  api:
    limits:
      - rate: 10/1s
      - rate: 1000/1d
        algorithm: fixed_window
      - rate: 100/1m
        algorithm: sliding_log
    overrides:
      bigcorp:
        limits:
          - rate: 100/1s
            burst: 300
          - rate: 100000/1d
          - rate: 200/1m
`
	r, err := ParseRules("rules.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	limit := func(a bucket.Algorithm, count int64, period time.Duration, burst int64) bucket.Limit {
		return bucket.MustLimitOf(a, count, period, burst)
	}
	day := 24 * time.Hour
	for _, tt := range []struct {
		rule, key string
		want      []bucket.Limit
	}{
		{"plain", "k", []bucket.Limit{limit(bucket.AlgoTokenBucket, 10, time.Second, 10)}},
		{"paced", "k", []bucket.Limit{limit(bucket.AlgoGCRA, 10, time.Second, 5)}},
		{"daily", "k", []bucket.Limit{limit(bucket.AlgoFixedWindow, 1000, day, 0)}},
		{"api", "k", []bucket.Limit{
			limit(bucket.AlgoTokenBucket, 10, time.Second, 10),
			limit(bucket.AlgoFixedWindow, 1000, day, 0),
			limit(bucket.AlgoSlidingLog, 100, time.Minute, 0),
		}},
		{"api", "bigcorp", []bucket.Limit{ // the override keeps each limit's algorithm
			limit(bucket.AlgoTokenBucket, 100, time.Second, 300),
			limit(bucket.AlgoFixedWindow, 100000, day, 0),
			limit(bucket.AlgoSlidingLog, 200, time.Minute, 0),
		}},
	} {
		if got := r.ByName[tt.rule].LimitsFor([]byte(tt.key)); !slices.Equal(got, tt.want) {
			t.Errorf("%s[%s] = %v, want %v", tt.rule, tt.key, got, tt.want)
		}
	}
}

func TestAlgorithmAndLimitsErrors(t *testing.T) {
	for _, tt := range []struct {
		name, src string
		want      []string
	}{
		{"unknown algorithm", "rules:\n  a:\n    rate: 1/s\n    algorithm: token-bucket\n",
			[]string{"bad.yaml:4:16: rules.a.algorithm: unknown algorithm \"token-bucket\" (known: token_bucket, leaky_bucket, gcra, fixed_window, sliding_window, sliding_log)"}},
		{"burst on a window", "rules:\n  a:\n    rate: 10/s\n    burst: 20\n    algorithm: fixed_window\n",
			[]string{"bad.yaml:4:12: rules.a.burst: fixed_window has no burst"}},
		{"sliding log too large", "rules:\n  a:\n    rate: 20000/s\n    algorithm: sliding_log\n",
			[]string{"bad.yaml:3:11: rules.a:", "exceeds 10000", "use sliding_window"}},
		{"both rate and limits", "rules:\n  a:\n    rate: 1/s\n    limits:\n      - rate: 2/s\n",
			[]string{"bad.yaml:5:7: rules.a.limits: give either limits: or rate/burst/algorithm, not both"}},
		{"limits not a list", "rules:\n  a:\n    limits: 2/s\n", []string{"bad.yaml:3:13: rules.a.limits: expected a list of limits"}},
		{"empty limits", "rules:\n  a:\n    limits: []\n", []string{"rules.a.limits: expected a list of limits"}},
		{"limit without rate", "rules:\n  a:\n    limits:\n      - burst: 3\n", []string{"bad.yaml:4:9: rules.a.limits[0].rate: missing"}},
		{"bad limit field", "rules:\n  a:\n    limits:\n      - rate: 1/s\n      - rate: 5/m\n        algo: gcra\n",
			[]string{"bad.yaml:6:15: rules.a.limits[1].algo: unknown field"}},
		{"too many limits", "rules:\n  a:\n    limits: [" + strings.Repeat("{rate: 1/s}, ", 8) + "{rate: 1/s}]\n", []string{"9 limits; a rule holds at most 8"}},
		{"override of a multi-limit rule gives rate", "rules:\n  a:\n    limits:\n      - rate: 1/s\n      - rate: 9/d\n    overrides:\n      k:\n        rate: 2/s\n",
			[]string{"rules.a.overrides.k.rate: unknown field", "rules.a.overrides.k.limits: missing: the rule has 2 limits"}},
		{"override with too few limits", "rules:\n  a:\n    limits:\n      - rate: 1/s\n      - rate: 9/d\n    overrides:\n      k:\n        limits:\n          - rate: 2/s\n",
			[]string{"bad.yaml:9:11: rules.a.overrides.k.limits: 1 limits; the rule has 2"}},
		{"override changes the algorithm", "rules:\n  a:\n    rate: 1/s\n    overrides:\n      k:\n        rate: 2/s\n        algorithm: gcra\n",
			[]string{"rules.a.overrides.k.algorithm: unknown field (known: rate, burst)"}},
		{"override burst on a window", "rules:\n  a:\n    rate: 5/m\n    algorithm: sliding_window\n    overrides:\n      k:\n        burst: 9\n",
			[]string{"rules.a.overrides.k.burst: sliding_window has no burst"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r, err := ParseRules("bad.yaml", []byte(tt.src))
			if err == nil || r != nil {
				t.Fatalf("accepted: %+v", r)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\ndoes not contain %q", err, w)
				}
			}
		})
	}
}

// A single token-bucket rule hashes as it did before rules could name an
// algorithm or hold several limits, so nodes on two versions do not report
// drift over the same file; any change of algorithm changes the hash.
func TestRulesHashOfAlgorithms(t *testing.T) {
	hash := func(src string) string {
		r, err := ParseRules("r.yaml", []byte(src))
		if err != nil {
			t.Fatal(err)
		}
		return r.Hash
	}
	plain := hash("rules:\n  a:\n    rate: 10/s\n")
	if plain != "7a7a9b2ae8905ab9" { // as computed by the version before algorithms
		t.Errorf("hash of a plain rule changed: %s", plain)
	}
	if explicit := hash("rules:\n  a:\n    rate: 10/s\n    algorithm: token_bucket\n"); explicit != plain {
		t.Errorf("naming the default algorithm changed the hash: %s vs %s", explicit, plain)
	}
	seen := map[string]string{plain: "token_bucket"}
	for _, a := range bucket.Algorithms()[1:] {
		h := hash("rules:\n  a:\n    rate: 10/s\n    algorithm: " + a.String() + "\n")
		if other, dup := seen[h]; dup {
			t.Errorf("%s hashes as %s", a, other)
		}
		seen[h] = a.String()
	}
	if h := hash("rules:\n  a:\n    limits:\n      - rate: 10/s\n"); h != plain {
		t.Errorf("a one-item limits: list hashes differently from rate: (%s vs %s)", h, plain)
	}
}

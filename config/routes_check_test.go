package config

import (
	"errors"
	"strings"
	"testing"
)

func TestCheckRulesNamesFileAndLine(t *testing.T) {
	rules, err := ParseRules("rules.yaml", []byte("rules:\n  api:\n    rate: 10/1s\n    burst: 20\n  two:\n    limits:\n      - {rate: 10/1s, burst: 50}\n      - {rate: 100/1d, burst: 5}\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, src string
		want      []string // substrings of the error; none: valid
	}{
		{"valid", "default:\n  - rule: api\nroutes:\n  - match: /x\n    limits:\n      - {rule: api, cost: 20}\n", nil},
		{"cost above burst", "routes:\n  - match: /x\n    limits:\n      - rule: api\n        cost: 21\n",
			[]string{"routes.yaml:5:15: routes[0].limits[0].cost: cost 21 exceeds the burst 20 of rule \"api\""}},
		{"unknown rule", "default:\n  - rule: nope\n", []string{`routes.yaml:2:11: default[0].rule: rule "nope" is not defined`}},
		{"smallest burst of several limits", "routes:\n  - match: /x\n    limits: [{rule: two, cost: 6}]\n", []string{"routes.yaml:3:32", "burst 5"}},
		{"every problem reported", "default:\n  - rule: nope\nroutes:\n  - match: /x\n    limits: [{rule: api, cost: 99}]\n",
			[]string{"routes.yaml:2:11", "routes.yaml:5:32"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r, err := ParseProxyRoutes("routes.yaml", []byte(tt.src))
			if err != nil {
				t.Fatal(err)
			}
			err = r.CheckRules(RulesLookup(rules))
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var fe *FieldError
			if !errors.Is(err, ErrInvalidRoutes) || !errors.As(err, &fe) {
				t.Fatalf("err %v: not an invalid-routes field error", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("err %q does not mention %q", err, w)
				}
			}
		})
	}
	// A lookup that cannot answer is neither a pass nor a refusal.
	r, _ := ParseProxyRoutes("routes.yaml", []byte("default:\n  - rule: api\n"))
	down := errors.New("daemon down")
	err = r.CheckRules(func(string) (int64, bool, error) { return 0, false, down })
	if !errors.Is(err, down) || errors.Is(err, ErrInvalidRoutes) {
		t.Fatalf("lookup failure: %v", err)
	}
	// The default routes name themselves in errors.
	err = DefaultProxyRoutes().CheckRules(RulesLookup(rules))
	if err == nil || !strings.Contains(err.Error(), "default routes") {
		t.Fatalf("default routes against rules without \"default\": %v", err)
	}
}

func TestForwardedHeaderSetting(t *testing.T) {
	for _, tt := range []struct {
		value string
		ok    bool
	}{{"X-Forwarded-For", true}, {"forwarded", true}, {"", true}, {"X-Real-IP", false}} {
		_, err := ParseProxyRoutes("routes.yaml", []byte("identity:\n  forwarded_header: \""+tt.value+"\"\n"))
		if (err == nil) != tt.ok {
			t.Errorf("forwarded_header %q: err %v", tt.value, err)
		}
	}
}

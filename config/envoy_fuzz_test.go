package config

import (
	"errors"
	"testing"
)

// FuzzParseEnvoy: any bytes either parse into a configuration whose every
// limit maps to a translated rule, or fail with FieldErrors only; never a
// panic.
func FuzzParseEnvoy(f *testing.F) {
	f.Add([]byte(envoyExample))
	f.Add([]byte("domain: a\ndescriptors:\n  - key: k\n    value: v*\n    descriptors:\n      - key: j\n        rate_limit: {unit: week, requests_per_unit: 0}\n"))
	f.Add([]byte("domain: [a\n"))
	f.Add([]byte("domain: a\ndescriptors: {}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := ParseEnvoy("f.yaml", EnvoyFile{Name: "f.yaml", Data: data})
		if err != nil {
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("error without a FieldError: %v", err)
			}
			return
		}
		for name, r := range e.Rules {
			if r.Name != name || len(r.Limits) != 1 {
				t.Fatalf("rule %q: %+v", name, r)
			}
		}
		merged := DefaultRules().WithEnvoy(e)
		if len(merged.ByName) != len(DefaultRules().ByName)+len(e.Rules) {
			t.Fatal("translated rules collide with the defaults")
		}
	})
}

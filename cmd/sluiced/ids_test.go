package main

import (
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

func TestParseIDs(t *testing.T) {
	names := map[string]string{"svc": "1001", "weird": "x"}
	lookup := func(n string) (string, error) {
		if id, ok := names[n]; ok {
			return id, nil
		}
		return "", errors.New("unknown user " + n)
	}
	tests := []struct {
		in   []string
		want []uint32
		err  string
	}{
		{nil, nil, ""},
		{[]string{"0", " 1000 ", "", "svc"}, []uint32{0, 1000, 1001}, ""},
		{[]string{"4294967295"}, []uint32{4294967295}, ""}, // refused by Settings.Validate, not here
		{[]string{"4294967296"}, nil, `--allow-uid "4294967296": not a 32-bit id`},
		{[]string{"-1"}, nil, `--allow-uid "-1": unknown user -1`},
		{[]string{"nobody-here"}, nil, `--allow-uid "nobody-here": unknown user nobody-here`},
		{[]string{"weird"}, nil, `--allow-uid "weird": not a 32-bit id`},
	}
	for _, tt := range tests {
		got, err := parseIDs("--allow-uid", tt.in, lookup)
		if tt.err != "" {
			if err == nil || err.Error() != tt.err {
				t.Errorf("parseIDs(%q) error %v, want %q", tt.in, err, tt.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("parseIDs(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
}

// The flags take repeated and comma-separated values, and the environment.
func TestAllowFlagsAndEnvironment(t *testing.T) {
	tests := []struct {
		args       []string
		env        map[string]string
		uids, gids []uint32
		err        string
	}{
		{args: nil},
		{args: []string{"--allow-uid", "1,2", "--allow-uid", "root", "--allow-gid", "7"}, uids: []uint32{1, 2, 0}, gids: []uint32{7}},
		{env: map[string]string{"SLUICE_ALLOW_UIDS": "5,6", "SLUICE_ALLOW_GIDS": "root, 8"}, uids: []uint32{5, 6}, gids: []uint32{0, 8}},
		{args: []string{"--allow-gid", "no-such-group-q7"}, err: `--allow-gid "no-such-group-q7"`},
	}
	for _, tt := range tests {
		for k, v := range tt.env {
			t.Setenv(k, v)
		}
		var uids, gids []uint32
		var err error
		a := app()
		a.Action = func(c *cli.Context) error {
			uids, gids, err = allowLists(c)
			return nil
		}
		if rerr := a.Run(append([]string{"sluiced"}, tt.args...)); rerr != nil {
			t.Fatalf("%v: %v", tt.args, rerr)
		}
		switch {
		case tt.err != "":
			if err == nil || !strings.HasPrefix(err.Error(), tt.err) {
				t.Errorf("args %v env %v: error %v, want %q", tt.args, tt.env, err, tt.err)
			}
		case err != nil || !reflect.DeepEqual(uids, tt.uids) || !reflect.DeepEqual(gids, tt.gids):
			t.Errorf("args %v env %v: uids %v gids %v (%v), want %v %v", tt.args, tt.env, uids, gids, err, tt.uids, tt.gids)
		}
		for k := range tt.env {
			os.Unsetenv(k) // t.Setenv restores the original at the end
		}
	}
}

package main

import (
	"testing"

	"github.com/sluicelabs/sluice/daemon/adminapi"
)

func TestGossipCell(t *testing.T) {
	yes, no := true, false
	for _, tt := range []struct {
		name      string
		m         adminapi.MemberView
		clustered bool
		want      string
	}{
		{"not clustered", adminapi.MemberView{State: "alive"}, false, "-"},
		{"gone", adminapi.MemberView{State: "gone", Encrypted: &yes}, true, "-"},
		{"an older node", adminapi.MemberView{State: "alive"}, true, "?"},
		{"encrypted and labelled", adminapi.MemberView{State: "alive", Encrypted: &yes, Labelled: &yes}, true, "encrypted"},
		{"encrypted, no label", adminapi.MemberView{State: "alive", Encrypted: &yes, Labelled: &no}, true, "encrypted, NO LABEL"},
		{"plaintext", adminapi.MemberView{State: "alive", Encrypted: &no, Labelled: &yes}, true, "PLAINTEXT"},
	} {
		if got := gossipCell(tt.m, tt.clustered); got != tt.want {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}
}

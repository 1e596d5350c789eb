package daemon

import (
	"io/fs"
	"testing"
)

func TestGroupReadableByRoot(t *testing.T) {
	const daemonUID, fsGroup = 65532, 4242
	in := []uint32{65532, fsGroup}
	for _, tt := range []struct {
		name       string
		perm       fs.FileMode
		owner, gid uint32
		euid       uint32
		groups     []uint32
		shared     bool
	}{
		{"a Kubernetes Secret with fsGroup (root:fsGroup 0440)", 0o440, 0, fsGroup, daemonUID, in, true},
		{"a packaged key (root:sluice 0640)", 0o640, 0, fsGroup, daemonUID, in, true},
		{"a group the daemon is not in", 0o440, 0, 777, daemonUID, in, false},
		{"group-writable", 0o460, 0, fsGroup, daemonUID, in, false},
		{"readable by others too", 0o444, 0, fsGroup, daemonUID, in, false},
		{"group may execute", 0o450, 0, fsGroup, daemonUID, in, false},
		{"owner may execute", 0o740, 0, fsGroup, daemonUID, in, false},
		{"owned by the daemon itself: 0600 it is", 0o640, daemonUID, fsGroup, daemonUID, in, false},
		{"owned by another user", 0o440, 1000, fsGroup, daemonUID, in, false},
		{"a daemon running as root", 0o640, 0, 0, 0, []uint32{0}, false},
		{"not group-readable at all: the usual check decides", 0o400, 0, fsGroup, daemonUID, in, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := groupReadableByRoot(tt.perm, tt.owner, tt.gid, tt.euid, tt.groups); got != tt.shared {
				t.Fatalf("groupReadableByRoot = %v, want %v", got, tt.shared)
			}
		})
	}
}

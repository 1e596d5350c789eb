package daemon

import "io/fs"

// A secret file may be readable by one group when root owns it and the
// daemon, not running as root, reads it through that group: root:G mode
// 0440 or 0640, never writable by the group, nothing for others. That is
// how Kubernetes mounts a Secret for a non-root container when the pod has
// an fsGroup (it makes every file root:fsGroup and adds group read), and
// how a package installs a key for a service user (root:sluice 0640), as
// PostgreSQL accepts a root-owned private key readable by its group. The
// group must then be one that only the daemon reads secrets through: in a
// pod the Secret volume is mounted into the sidecar alone, so the
// application container, though in the fsGroup, cannot reach the file; on
// a host, the key's group must not be the socket's (deploy/systemd/). A
// daemon running as root, or owning the file itself, still needs 0600 or
// 0400: it has no reason to share.

// groupReadableByRoot reports whether a secret file of mode perm, owned by
// uid owner and group gid, is shared as above with this daemon (effective
// uid euid, member of groups).
func groupReadableByRoot(perm fs.FileMode, owner, gid, euid uint32, groups []uint32) bool {
	if owner != 0 || euid == 0 || perm&0o040 == 0 || perm&0o137 != 0 {
		return false
	}
	for _, g := range groups {
		if g == gid {
			return true
		}
	}
	return false
}

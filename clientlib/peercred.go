package clientlib

import (
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
)

// PeerCred is what the kernel recorded about the process that serves a Unix
// socket: its pid, user and group when it made the socket.
type PeerCred struct {
	PID      int32
	UID, GID uint32
}

// PeerCredChecked reports whether this system lets a Client verify its
// daemon's credentials (Linux: SO_PEERCRED). Where it is false,
// Options.DaemonUIDs is not enforced.
const PeerCredChecked = peerCredSupported

// DaemonUIDsEnv names the environment variable that, when Options.DaemonUIDs
// is empty, lists the uids a daemon may run as (comma-separated numbers).
const DaemonUIDsEnv = "SLUICE_DAEMON_UIDS"

// defaultDaemonUIDs is root and this process's effective uid, unless
// $SLUICE_DAEMON_UIDS says otherwise.
func defaultDaemonUIDs() ([]uint32, error) {
	if env := os.Getenv(DaemonUIDsEnv); env != "" {
		uids, err := ParseUIDs(env)
		if err != nil {
			return nil, fmt.Errorf("$%s: %w", DaemonUIDsEnv, err)
		}
		return uids, nil
	}
	self := uint32(os.Geteuid())
	if self == 0 {
		return []uint32{0}, nil
	}
	return []uint32{0, self}, nil
}

// ParseUIDs parses a comma-separated list of numeric uids.
func ParseUIDs(s string) ([]uint32, error) {
	var out []uint32
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.ParseUint(f, 10, 32)
		if err != nil || n == 1<<32-1 {
			return nil, fmt.Errorf("parse uid %q: want a number below 4294967295", f)
		}
		out = append(out, uint32(n))
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("parse uids %q: none listed", s)
	}
	return out, nil
}

// verifyDaemon checks that nc is served by a process running as one of the
// trusted uids. On systems without SO_PEERCRED it passes (see PeerCredChecked).
func verifyDaemon(nc net.Conn, path string, trusted []uint32) (PeerCred, error) {
	if !peerCredSupported {
		return PeerCred{}, nil
	}
	p, err := readPeerCred(nc)
	if err != nil {
		return p, &ReachError{Path: path, Cause: "daemon credentials unreadable", Err: fmt.Errorf("%w: %w", ErrUntrustedDaemon, err),
			Fix: "a Unix socket server's credentials should always be readable; is the path a socket?"}
	}
	if slices.Contains(trusted, p.UID) {
		return p, nil
	}
	return p, &ReachError{
		Path:   path,
		Cause:  "served by an untrusted process",
		Detail: fmt.Sprintf("the socket is served by pid %d running as uid %d gid %d; trusted daemon uids are %s", p.PID, p.UID, p.GID, uidList(trusted)),
		Fix: fmt.Sprintf("another local user may be impersonating sluiced; if uid %d really is your daemon's, trust it with Options.DaemonUIDs or $%s=%d",
			p.UID, DaemonUIDsEnv, p.UID),
		Err: ErrUntrustedDaemon,
	}
}

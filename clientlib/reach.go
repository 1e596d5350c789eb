package clientlib

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/sluicelabs/sluice/ipc"
)

// ReachError says why a client could not reach, or would not trust, the
// daemon at a socket path: what was found there and how to fix it. Decision.Err
// carries one from the first failed call on, and the client logs each
// distinct one once. errors.Is sees through it to ErrDaemonDown,
// ErrProtocol or ErrUntrustedDaemon, and to the system's error (for example
// fs.ErrPermission).
type ReachError struct {
	Path   string // the socket path
	Cause  string // what went wrong, in a few words: "permission denied", "no such file", ...
	Detail string // what was found: modes, owners, this process's ids, the path's origin
	Fix    string // what to do about it
	Err    error  // the underlying error
}

func (e *ReachError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "sluice: cannot reach sluiced at %s: %s", e.Path, e.Cause)
	switch {
	case e.Detail != "" && e.Fix != "":
		fmt.Fprintf(&b, " (%s: %s)", e.Detail, e.Fix)
	case e.Detail != "":
		fmt.Fprintf(&b, " (%s)", e.Detail)
	case e.Fix != "":
		fmt.Fprintf(&b, " (%s)", e.Fix)
	}
	return b.String()
}

// Unwrap returns the underlying error.
func (e *ReachError) Unwrap() error { return e.Err }

// ErrUntrustedDaemon is wrapped by the error of a connection refused because
// the process serving the socket does not run as a trusted uid (see
// Options.DaemonUIDs): its answers would not be the daemon's.
var ErrUntrustedDaemon = errors.New("sluiced's socket is served by an untrusted process")

// SocketPathChoice returns ipc.DefaultSocketPath() and why that path was
// chosen, in words an operator can act on.
func SocketPathChoice() (path, why string) {
	path = ipc.DefaultSocketPath()
	if os.Getenv("SLUICE_SOCKET") != "" {
		return path, "$SLUICE_SOCKET is set"
	}
	if dir := os.Getenv("XDG_RUNTIME_DIR"); dir != "" {
		if st, err := os.Stat(dir); err == nil && st.IsDir() {
			return path, fmt.Sprintf("$SLUICE_SOCKET is unset and $XDG_RUNTIME_DIR (%s) exists", dir)
		}
	}
	if os.Getuid() == 0 {
		return path, "$SLUICE_SOCKET and $XDG_RUNTIME_DIR are unset; the default for root"
	}
	return path, fmt.Sprintf("$SLUICE_SOCKET and $XDG_RUNTIME_DIR are unset; the default for uid %d is under $TMPDIR (a sluiced run as root listens on /run/sluice/sluiced.sock instead)", os.Getuid())
}

// identity is this process's user and groups, as file permissions see them.
type identity struct {
	uid  uint32
	gids []uint32
}

func self() identity {
	id := identity{uid: uint32(os.Geteuid()), gids: []uint32{uint32(os.Getegid())}}
	if gs, err := os.Getgroups(); err == nil {
		for _, g := range gs {
			if !slices.Contains(id.gids, uint32(g)) {
				id.gids = append(id.gids, uint32(g))
			}
		}
	}
	return id
}

func (id identity) String() string { return fmt.Sprintf("uid %d gids %v", id.uid, id.gids) }

// may reports whether id has the permission bits want (0o1 search/execute,
// 0o2 write, 0o4 read) on fi; ok is false when the owner is unknown.
func (id identity) may(fi fs.FileInfo, want fs.FileMode) (allowed, ok bool) {
	uid, gid, ok := fileOwner(fi)
	if !ok {
		return true, false
	}
	if id.uid == 0 {
		return true, true
	}
	perm := fi.Mode().Perm()
	switch {
	case uid == id.uid:
		perm >>= 6
	case slices.Contains(id.gids, gid):
		perm >>= 3
	}
	return perm&want == want, true
}

// describe says a file's mode and owner: "mode 0660 owned by uid 0 gid 0".
func describe(fi fs.FileInfo) string {
	uid, gid, ok := fileOwner(fi)
	if !ok {
		return fmt.Sprintf("mode %04o", octalMode(fi))
	}
	return fmt.Sprintf("mode %04o owned by uid %d gid %d", octalMode(fi), uid, gid)
}

// octalMode is a file's permission bits as chmod writes them, with the
// setuid, setgid and sticky bits.
func octalMode(fi fs.FileInfo) uint32 {
	m := uint32(fi.Mode().Perm())
	if fi.Mode()&fs.ModeSetuid != 0 {
		m |= 0o4000
	}
	if fi.Mode()&fs.ModeSetgid != 0 {
		m |= 0o2000
	}
	if fi.Mode()&fs.ModeSticky != 0 {
		m |= 0o1000
	}
	return m
}

// examinePath looks at the socket path and its directories, without
// connecting, for what would stop this process from connecting. It returns
// nil when nothing visible is wrong. why says where the path came from.
func examinePath(path, why string) *ReachError { return examinePathAs(self(), path, why) }

// dirsFromRoot lists the directories on the way to path, the root first.
func dirsFromRoot(path string) []string {
	abs, err := filepath.Abs(path)
	if err != nil {
		abs = path
	}
	var dirs []string
	for d := filepath.Dir(abs); ; d = filepath.Dir(d) {
		dirs = append(dirs, d)
		if d == filepath.Dir(d) {
			break
		}
	}
	slices.Reverse(dirs)
	return dirs
}

// examinePathAs is examinePath for a process running as me.
func examinePathAs(me identity, path, why string) *ReachError {
	// Every directory on the way, from the root down, must be searchable.
	for _, d := range dirsFromRoot(path) {
		fi, err := os.Stat(d)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return &ReachError{Path: path, Cause: "no such directory", Err: fmt.Errorf("%w: %w", ErrDaemonDown, err),
				Detail: fmt.Sprintf("%s does not exist; this path: %s%s", d, why, elsewhere(path)),
				Fix:    missingFix()}
		case err != nil:
			return &ReachError{Path: path, Cause: "cannot examine " + d, Err: fmt.Errorf("%w: %w", ErrDaemonDown, err), Detail: err.Error()}
		case !fi.IsDir():
			return &ReachError{Path: path, Cause: "not a directory", Err: fmt.Errorf("%w: %s is not a directory", ErrDaemonDown, d),
				Detail: fmt.Sprintf("%s is a file, not a directory; this path: %s", d, why), Fix: missingFix()}
		}
		if ok, known := me.may(fi, 0o1); known && !ok {
			uid, gid, _ := fileOwner(fi)
			fix := fmt.Sprintf("let this user search %s (chmod o+x %s, or add the user to group %d and chmod g+x), or serve the socket from a directory it can reach (sluiced --socket); the directory's owner is uid %d",
				d, d, gid, uid)
			if fi.Mode().Perm()&0o010 != 0 { // the group may search it already: a service joins the group
				fix = fmt.Sprintf("add this user to group %d (the directory's group, which may search it), or serve the socket from a directory it can reach (sluiced --socket); the directory's owner is uid %d",
					gid, uid)
			}
			return &ReachError{Path: path, Cause: "permission denied", Err: fmt.Errorf("%w: %w", ErrDaemonDown, fs.ErrPermission),
				Detail: fmt.Sprintf("the directory %s is %s; this process runs as %s and cannot search it", d, describe(fi), me),
				Fix:    fix}
		}
	}
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return &ReachError{Path: path, Cause: "no such file", Err: fmt.Errorf("%w: %w", ErrDaemonDown, err),
			Detail: fmt.Sprintf("nothing is there; this path: %s%s", why, elsewhere(path)),
			Fix:    missingFix()}
	case err != nil:
		return &ReachError{Path: path, Cause: "cannot examine the socket", Err: fmt.Errorf("%w: %w", ErrDaemonDown, err), Detail: err.Error()}
	case fi.Mode()&fs.ModeSocket == 0:
		return &ReachError{Path: path, Cause: "not a socket", Err: fmt.Errorf("%w: not a socket", ErrDaemonDown),
			Detail: fmt.Sprintf("the path holds a %s, not a Unix socket", fileKind(fi)), Fix: missingFix()}
	}
	if ok, known := me.may(fi, 0o2); known && !ok {
		uid, gid, _ := fileOwner(fi)
		return &ReachError{Path: path, Cause: "permission denied", Err: fmt.Errorf("%w: %w", ErrDaemonDown, fs.ErrPermission),
			Detail: fmt.Sprintf("the socket is %s; this process runs as %s", describe(fi), me),
			Fix: fmt.Sprintf("add this user to group %d (the socket's group), or run sluiced with --socket-mode 0666 and admit only this user with --allow-uid %d (or --allow-gid %d); the socket's owner is uid %d",
				gid, me.uid, me.gids[0], uid)}
	}
	return nil
}

func missingFix() string {
	return "start sluiced, or point this client at the socket sluiced serves (it logs socket=... at start) with $SLUICE_SOCKET or Options.SocketPath; `sluice doctor` shows both"
}

func fileKind(fi fs.FileInfo) string {
	switch {
	case fi.IsDir():
		return "directory"
	case fi.Mode().IsRegular():
		return "regular file"
	}
	return "file of mode " + fi.Mode().String()
}

// elsewhere names other sluiced sockets found where daemons usually listen:
// the usual cause of a missing socket is a daemon run as another user.
func elsewhere(path string) string {
	found := OtherSockets(path)
	if len(found) == 0 {
		return ""
	}
	return fmt.Sprintf("; sluiced may be listening at %s (set $SLUICE_SOCKET to the right one)", strings.Join(found, ", "))
}

// OtherSockets lists sluiced sockets other than path in the places daemons
// listen by default (/run/sluice, $XDG_RUNTIME_DIR/sluice, $TMPDIR/sluice-*),
// at most 5, including those in directories this user may not search (a
// daemon's socket directory is private to its user and group).
func OtherSockets(path string) []string {
	cands := []string{"/run/sluice/sluiced.sock"}
	if dir := os.Getenv("XDG_RUNTIME_DIR"); dir != "" {
		cands = append(cands, filepath.Join(dir, "sluice", "sluiced.sock"))
	}
	// Per-user directories are private (0750): list the socket a directory
	// would hold even when this user cannot look inside it.
	if m, err := filepath.Glob(filepath.Join(os.TempDir(), "sluice-*")); err == nil {
		for _, dir := range m {
			cands = append(cands, filepath.Join(dir, "sluiced.sock"))
		}
	}
	abs, _ := filepath.Abs(path)
	var out []string
	for _, c := range cands {
		if c == path || c == abs || slices.Contains(out, c) {
			continue
		}
		fi, err := os.Lstat(c)
		if err == nil && fi.Mode()&fs.ModeSocket != 0 || errors.Is(err, fs.ErrPermission) {
			out = append(out, c)
		}
		if len(out) == 5 {
			break
		}
	}
	return out
}

// explainDial turns a failed connect into a ReachError.
func explainDial(path, why string, err error) *ReachError {
	if re := examinePath(path, why); re != nil {
		re.Err = fmt.Errorf("%w: %w", ErrDaemonDown, err)
		return re
	}
	re := &ReachError{Path: path, Err: fmt.Errorf("%w: %w", ErrDaemonDown, err)}
	var errno syscall.Errno
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		re.Cause = "connection refused"
		re.Detail = "a socket file is there but no process listens on it"
		re.Fix = "sluiced is not running (one that died leaves its socket behind; starting sluiced replaces it) or now serves another path"
	case errors.Is(err, syscall.EAGAIN):
		re.Cause = "the daemon's accept queue is full"
		re.Fix = "sluiced is overloaded or stuck; see its log"
	case errors.Is(err, fs.ErrPermission):
		re.Cause = "permission denied"
		re.Detail = "this process runs as " + self().String()
	case errors.As(err, &errno):
		re.Cause = errno.Error()
	default:
		re.Cause = err.Error()
	}
	return re
}

// explainHandshake turns a failed handshake into a ReachError.
func explainHandshake(path string, dialTimeout string, err error) *ReachError {
	var e *ipc.Error
	switch {
	case errors.As(err, &e) && e.Code == ipc.CodePeerRefused:
		me := self()
		return &ReachError{Path: path, Cause: "sluiced refused this process", Err: fmt.Errorf("%w: %w", ErrDaemonDown, err),
			Detail: fmt.Sprintf("it said %q; this process runs as %s", e.Message, me),
			Fix:    fmt.Sprintf("admit it with sluiced --allow-uid %d (or --allow-gid %d)", me.uid, me.gids[0])}
	case errors.As(err, &e) && e.Code == ipc.CodeTooManyConns:
		return &ReachError{Path: path, Cause: "sluiced is at its connection cap", Err: fmt.Errorf("%w: %w", ErrDaemonDown, err),
			Detail: e.Message, Fix: "raise sluiced --max-conns, or find the clients holding its connections"}
	case errors.As(err, &e):
		return &ReachError{Path: path, Cause: "sluiced refused the handshake", Err: fmt.Errorf("%w: %w", ErrProtocol, err), Detail: e.Message}
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return &ReachError{Path: path, Cause: "closed during the handshake", Err: fmt.Errorf("%w: %w", ErrDaemonDown, err),
			Fix: "the process on this socket accepted the connection and closed it before its WELCOME: sluiced may be shutting down or at --max-conns, or the socket is not sluiced's; see its log"}
	case errors.Is(err, os.ErrDeadlineExceeded):
		return &ReachError{Path: path, Cause: "no answer to the handshake", Err: fmt.Errorf("%w: %w", ErrDaemonDown, err),
			Detail: "no WELCOME within " + dialTimeout, Fix: "sluiced is stuck or overloaded, or the socket is not sluiced's"}
	case errors.Is(err, ipc.ErrMalformed), errors.Is(err, ipc.ErrFrameTooLarge):
		return &ReachError{Path: path, Cause: "not speaking the sluice protocol", Err: fmt.Errorf("%w: %w", ErrProtocol, err),
			Fix: "the process on this socket is not sluiced (or an incompatible version)"}
	}
	return &ReachError{Path: path, Cause: "handshake failed", Err: fmt.Errorf("%w: %w", ErrProtocol, err)}
}

// uidList formats uids for a message.
func uidList(uids []uint32) string {
	s := make([]string, len(uids))
	for i, u := range uids {
		s[i] = strconv.FormatUint(uint64(u), 10)
	}
	return strings.Join(s, ", ")
}

package clientlib

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"time"

	"github.com/sluicelabs/sluice/ipc"
)

// Diagnosis is what Diagnose found, step by step, on the way from this
// process to the daemon: the path and why it was chosen, each directory,
// the socket file, the connection, who serves it, and the handshake.
type Diagnosis struct {
	Path    string // the socket path
	PathWhy string // why that path
	Self    string // this process's uid and groups
	Steps   []DiagnosisStep
	// Problem is the first problem found, nil when the daemon was reached,
	// trusted and answered the handshake.
	Problem *ReachError
	Welcome ipc.Welcome // the daemon's WELCOME, when the handshake succeeded
	Daemon  PeerCred    // who serves the socket, when it could be read
}

// DiagnosisStep is one thing looked at.
type DiagnosisStep struct {
	Name  string // "directory /run", "socket", "connect", "daemon credentials", "handshake"
	OK    bool
	Found string // what was found
	Fix   string // how to fix it, when not OK
}

// Diagnose looks at every step from this process to the daemon at
// opts.SocketPath (default: ipc.DefaultSocketPath) and says what it found and
// how to fix each problem. pathWhy says where the path came from ("" lets
// Diagnose say it). It connects at most once and sends only HELLO.
func Diagnose(ctx context.Context, opts Options, pathWhy string) Diagnosis {
	why := opts.setDefaults()
	if pathWhy == "" {
		pathWhy = why
	}
	if dl, ok := ctx.Deadline(); ok {
		opts.DialTimeout = min(opts.DialTimeout, time.Until(dl))
	}
	me := self()
	d := Diagnosis{Path: opts.SocketPath, PathWhy: pathWhy, Self: me.String()}
	add := func(s DiagnosisStep) { d.Steps = append(d.Steps, s) }
	problem := func(re *ReachError) {
		if d.Problem == nil {
			d.Problem = re
		}
	}
	add(DiagnosisStep{Name: "path", OK: true, Found: fmt.Sprintf("%s (%s)", opts.SocketPath, pathWhy)})

	// What the file system says, as the kernel will apply it to this process.
	if re := examinePathAs(me, opts.SocketPath, pathWhy); re != nil {
		problem(re)
	}
	dirs := dirsFromRoot(opts.SocketPath)
	for _, dir := range dirs {
		fi, err := os.Stat(dir)
		if err != nil {
			add(DiagnosisStep{Name: "directory " + dir, Found: err.Error(), Fix: fixOf(d.Problem)})
			return d
		}
		ok, _ := me.may(fi, 0o1)
		s := DiagnosisStep{Name: "directory " + dir, OK: ok && fi.IsDir(), Found: describe(fi) + yesNo("; this process may search it", ok)}
		if dir == dirs[len(dirs)-1] && fi.Mode().Perm()&0o002 != 0 {
			// Not a failure: the daemon-credentials check below is what
			// stops an impostor here. But worth knowing.
			s.Found += "; note: every user may create files here"
			if fi.Mode()&fs.ModeSticky == 0 {
				s.Found += " and replace the socket (no sticky bit)"
			}
		}
		if !s.OK {
			s.Fix = fixOf(d.Problem)
		}
		add(s)
		if !s.OK {
			return d
		}
	}
	fi, err := os.Stat(opts.SocketPath)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		add(DiagnosisStep{Name: "socket", Found: "does not exist" + elsewhere(opts.SocketPath), Fix: fixOf(d.Problem)})
		return d
	case err != nil:
		add(DiagnosisStep{Name: "socket", Found: err.Error(), Fix: fixOf(d.Problem)})
		return d
	case fi.Mode()&fs.ModeSocket == 0:
		add(DiagnosisStep{Name: "socket", Found: "not a socket: a " + fileKind(fi), Fix: fixOf(d.Problem)})
		return d
	}
	ok, _ := me.may(fi, 0o2)
	s := DiagnosisStep{Name: "socket", OK: ok, Found: describe(fi) + yesNo("; this process may connect to it", ok)}
	if !ok {
		s.Fix = fixOf(d.Problem)
	}
	add(s)

	nc, err := net.DialTimeout("unix", opts.SocketPath, opts.DialTimeout)
	if err != nil {
		re := explainDial(opts.SocketPath, pathWhy, err)
		problem(re)
		add(DiagnosisStep{Name: "connect", Found: re.Cause + detailOf(re), Fix: re.Fix})
		return d
	}
	defer nc.Close()
	add(DiagnosisStep{Name: "connect", OK: true, Found: "connected"})

	if peerCredSupported {
		p, err := verifyDaemon(nc, opts.SocketPath, opts.DaemonUIDs)
		d.Daemon = p
		var re *ReachError
		switch {
		case errors.As(err, &re) && p.PID == 0 && p.UID == 0:
			problem(re)
			add(DiagnosisStep{Name: "daemon credentials", Found: re.Err.Error(), Fix: re.Fix})
			return d
		case err != nil:
			problem(re)
			add(DiagnosisStep{Name: "daemon credentials", Found: fmt.Sprintf("pid %d uid %d gid %d; trusted daemon uids: %s", p.PID, p.UID, p.GID, uidList(opts.DaemonUIDs)), Fix: re.Fix})
			return d
		}
		add(DiagnosisStep{Name: "daemon credentials", OK: true, Found: fmt.Sprintf("pid %d uid %d gid %d: trusted (trusted daemon uids: %s)", p.PID, p.UID, p.GID, uidList(opts.DaemonUIDs))})
	} else {
		add(DiagnosisStep{Name: "daemon credentials", OK: true, Found: "not checked: this system has no SO_PEERCRED"})
	}

	nc.SetDeadline(time.Now().Add(opts.DialTimeout))
	w, err := handshake(nc, opts.Name)
	if err != nil {
		re := explainHandshake(opts.SocketPath, opts.DialTimeout.String(), err)
		problem(re)
		add(DiagnosisStep{Name: "handshake", Found: re.Cause + detailOf(re), Fix: re.Fix})
		return d
	}
	d.Welcome = w
	add(DiagnosisStep{Name: "handshake", OK: true, Found: fmt.Sprintf("protocol version %d with %q; max frame %d bytes, max batch %d, max key length %d",
		w.Version, w.Server, w.MaxFrame, w.MaxBatch, w.MaxKeyLen)})
	// Whatever the file system seemed to say, the connection went through
	// (root, or a capability): nothing is wrong for this process.
	d.Problem = nil
	return d
}

// handshake sends HELLO and reads WELCOME (or the ERROR that refuses it).
func handshake(nc net.Conn, name string) (ipc.Welcome, error) {
	if _, err := nc.Write(ipc.AppendHello(nil, ipc.Hello{Version: ipc.ProtocolVersion, Client: name})); err != nil {
		return ipc.Welcome{}, err
	}
	body, err := ipc.ReadFrame(bufio.NewReader(nc), nil, readBufSize)
	if err != nil {
		return ipc.Welcome{}, err
	}
	w, err := ipc.DecodeWelcome(body)
	if err != nil {
		if e, derr := ipc.DecodeError(body); derr == nil {
			return ipc.Welcome{}, e
		}
		return ipc.Welcome{}, err
	}
	return w, nil
}

func fixOf(re *ReachError) string {
	if re == nil {
		return ""
	}
	return re.Fix
}

func detailOf(re *ReachError) string {
	if re.Detail == "" {
		return ""
	}
	return ": " + re.Detail
}

func yesNo(what string, ok bool) string {
	if ok {
		return what + ": yes"
	}
	return what + ": NO"
}

package daemon

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"unsafe"

	"golang.org/x/sys/unix"
)

// writerEvents reports, for one file, when a process modifies it in place and
// when a process that had it open for writing closes it (inotify's IN_MODIFY
// and IN_CLOSE_WRITE). fsnotify v1.10 implements close-write but does not
// export it (fsnotify issues #698, #764), so Linux watches for it here, on
// one inotify descriptor whose queue keeps the two kinds in order.
//
// The watch is on the file's directory, so a file replaced by a rename keeps
// being watched. Events for other names in the directory are ignored.
type writerEvents struct {
	f    *os.File
	name string
	// C receives writeModified and writeClosed for the file, in the order the
	// kernel reported them, and writeOverflow if the kernel dropped events. It
	// is closed when the descriptor is closed.
	C    chan writeEvent
	done chan struct{}
}

// writeEvent is what writerEvents reports.
type writeEvent uint8

const (
	writeModified writeEvent = iota + 1 // the file's content changed in place
	writeClosed                         // a process closed a descriptor it had open for writing
	writeOverflow                       // the kernel dropped events: assume no writer is left
)

// closeWriteSupported reports whether this platform tells when a writer closes a file.
const closeWriteSupported = true

// newWriterEvents watches path's directory for in-place writes to path.
func newWriterEvents(path string) (*writerEvents, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("watch rules file writers: inotify: %w", err)
	}
	dir := filepath.Dir(path)
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_MODIFY|unix.IN_CLOSE_WRITE); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("watch rules file writers in %s: %w", dir, err)
	}
	// A non-blocking descriptor goes through the runtime's poller, so Close
	// ends a pending Read.
	w := &writerEvents{f: os.NewFile(uintptr(fd), "inotify"), name: filepath.Base(path), C: make(chan writeEvent, 64), done: make(chan struct{})}
	go w.read()
	return w, nil
}

// Close stops the watch; C is closed soon after.
func (w *writerEvents) Close() error {
	close(w.done)
	return w.f.Close()
}

// send hands e to the loop unless the watch was closed.
func (w *writerEvents) send(e writeEvent) bool {
	select {
	case w.C <- e:
		return true
	case <-w.done:
		return false
	}
}

func (w *writerEvents) read() {
	defer close(w.C)
	var buf [16 << 10]byte
	for {
		n, err := w.f.Read(buf[:])
		if err != nil {
			if !errors.Is(err, os.ErrClosed) {
				w.send(writeOverflow) // the watch is gone: stop waiting for writers
			}
			return
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			nameAt := off + unix.SizeofInotifyEvent
			end := nameAt + int(ev.Len)
			if end > n {
				break
			}
			name := buf[nameAt:end]
			for len(name) > 0 && name[len(name)-1] == 0 {
				name = name[:len(name)-1]
			}
			off = end
			var e writeEvent
			switch {
			case ev.Mask&unix.IN_Q_OVERFLOW != 0:
				e = writeOverflow
			case string(name) != w.name:
				continue
			case ev.Mask&unix.IN_CLOSE_WRITE != 0:
				e = writeClosed
			case ev.Mask&unix.IN_MODIFY != 0:
				e = writeModified
			default:
				continue
			}
			if !w.send(e) {
				return
			}
		}
	}
}

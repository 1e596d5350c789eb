package daemon

import (
	"bytes"
	"context"
	"crypto/sha256"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/sluicelabs/sluice/config"
)

// watchDebounce lets an editor's or a ConfigMap's burst of events settle
// before the file is read; the file must also stand still (same size and
// modification time) across it.
const watchDebounce = 100 * time.Millisecond

// The daemon reloads the rules when the rules file changes. It watches the
// file's directory rather than the file, so that editors that write a new file
// and rename it over the old one, and Kubernetes ConfigMaps that swap a
// symlinked directory, are seen too. A change that leaves the content as it
// was reloads nothing; a bad file is refused, which keeps the last good rules.
//
// A file written in place is never loaded half-way, even when what has been
// written so far is valid on its own (3 of 10 rules):
//   - On Linux the watch also hears inotify's IN_MODIFY and IN_CLOSE_WRITE
//     for the file: once it has been modified in place, it is read only after
//     the writer closes it (or the file is replaced by another).
//   - Everywhere, the file is read only once its size and modification time
//     have stood still for watchDebounce, and it is read again if they
//     changed while it was being read.
//
// The recommended way to update the rules is still to write a temporary file
// in the same directory and rename it over the rules file: the rename is
// atomic, so the daemon sees the old rules or the new, never a mixture.
//
// startWatch sets the watch up before the daemon reports ready, so no change
// made after that is missed; the returned function runs the loop.
func (d *Daemon) startWatch() (loop func(ctx context.Context), ok bool) {
	path := d.settings.RulesPath
	w, err := fsnotify.NewWatcher()
	if err != nil {
		d.log.Warn("cannot watch the rules file; reload with SIGHUP", "error", err)
		return nil, false
	}
	if err := w.Add(filepath.Dir(path)); err != nil {
		w.Close()
		d.log.Warn("cannot watch the rules file's directory; reload with SIGHUP", "dir", filepath.Dir(path), "error", err)
		return nil, false
	}
	var writers *writerEvents
	if closeWriteSupported {
		if writers, err = newWriterEvents(path); err != nil {
			d.log.Warn("cannot tell when a writer closes the rules file; relying on it standing still", "error", err)
			writers = nil
		}
	}
	return func(ctx context.Context) {
		defer w.Close()
		if writers != nil {
			defer writers.Close()
		}
		d.watchLoop(ctx, w, writers, path)
	}, true
}

// fileStamp is what tells that a file changed without reading it.
type fileStamp struct {
	ok    bool
	size  int64
	mtime time.Time
	info  os.FileInfo // for os.SameFile: a file replaced by another
}

func stampOf(path string) fileStamp {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}
	}
	return fileStamp{ok: true, size: fi.Size(), mtime: fi.ModTime(), info: fi}
}

// same reports whether a and b saw the same file with the same size and time.
func (a fileStamp) same(b fileStamp) bool {
	if !a.ok || !b.ok {
		return a.ok == b.ok
	}
	return a.size == b.size && a.mtime.Equal(b.mtime) && os.SameFile(a.info, b.info)
}

func (d *Daemon) watchLoop(ctx context.Context, w *fsnotify.Watcher, writers *writerEvents, path string) {
	defer d.fileWriting.Store(false)
	last := d.loadedDigest // what New read: a change made since is a change
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var armed fileStamp // the file when the timer was last armed
	arm := func() {
		armed = stampOf(path)
		timer.Reset(watchDebounce)
	}
	// writing is set while the file has been modified in place and the
	// writer has not closed it; writtenFile is the file it was writing.
	writing, waitLogged := false, false
	var writtenFile fileStamp
	var writes <-chan writeEvent
	if writers != nil {
		writes = writers.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case err, ok := <-w.Errors:
			if !ok {
				return
			}
			d.log.Warn("rules watcher", "error", err)
		case _, ok := <-w.Events:
			if !ok {
				return
			}
			// Any event in the directory may be ours (a rename, a symlink
			// swap): settle, then compare contents.
			arm()
		case e, ok := <-writes:
			if !ok {
				writes, writing = nil, false
				d.fileWriting.Store(false)
				arm()
				continue
			}
			switch e {
			case writeModified:
				if !writing {
					writing, waitLogged, writtenFile = true, false, stampOf(path)
				}
			case writeClosed, writeOverflow:
				writing = false
			}
			d.fileWriting.Store(writing)
			arm()
		case <-timer.C:
			now := stampOf(path)
			if writing {
				if now.ok && writtenFile.ok && os.SameFile(now.info, writtenFile.info) {
					if !waitLogged {
						d.log.Info("rules file is being written in place; loading it when the writer closes it", "path", path)
						waitLogged = true
					}
					continue // the close will arm the timer
				}
				writing = false // replaced by another file: that one is complete
				d.fileWriting.Store(false)
			}
			if !now.same(armed) {
				arm() // still changing: let it stand still for a whole debounce
				continue
			}
			seq := d.nextReadSeq()
			data, err := config.ReadRulesFile(path)
			if err != nil {
				if now.ok { // a missing file (mid-swap) is not worth a line
					d.failReload(err)
				}
				continue
			}
			if after := stampOf(path); !after.same(now) {
				arm() // changed while being read
				continue
			}
			sum := sha256.Sum256(data)
			if bytes.Equal(sum[:], last) {
				continue
			}
			last = sum[:]
			d.log.Info("rules file changed; reloading", "path", path)
			_ = d.reloadFileData(seq, data) // logged; a bad file keeps the last good rules
		}
	}
}

// fileDigest hashes a file's content, following symlinks; nil if unreadable.
func fileDigest(path string) []byte {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	sum := sha256.Sum256(data)
	return sum[:]
}

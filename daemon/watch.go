package daemon

import (
	"bytes"
	"context"
	"crypto/sha256"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
)

// watchDebounce lets an editor's or a ConfigMap's burst of events settle
// before the file is read.
const watchDebounce = 100 * time.Millisecond

// The daemon reloads the rules when the rules file changes. It watches the
// file's directory rather than the file, so that editors that write a new file
// and rename it over the old one, and Kubernetes ConfigMaps that swap a
// symlinked directory, are seen too. A change that leaves the content as it
// was reloads nothing; a bad file is refused by Reload, which keeps the last
// good rules.
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
	return func(ctx context.Context) { defer w.Close(); d.watchLoop(ctx, w, path) }, true
}

func (d *Daemon) watchLoop(ctx context.Context, w *fsnotify.Watcher, path string) {
	last := d.loadedDigest // what New read: a change made since is a change
	timer := time.NewTimer(time.Hour)
	timer.Stop()
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
			timer.Reset(watchDebounce)
		case <-timer.C:
			now := fileDigest(path)
			if now == nil || bytes.Equal(now, last) {
				continue
			}
			last = now
			d.log.Info("rules file changed; reloading", "path", path)
			_ = d.Reload() // logged by Reload; a bad file keeps the last good rules
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

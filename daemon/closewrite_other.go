//go:build !linux

package daemon

import "errors"

// writerEvents is Linux-only (see closewrite_linux.go); elsewhere the watch
// relies on the file's size and modification time standing still.
type writerEvents struct{ C chan writeEvent }

type writeEvent uint8

const (
	writeModified writeEvent = iota + 1
	writeClosed
	writeOverflow
)

// closeWriteSupported reports whether this platform tells when a writer closes a file.
const closeWriteSupported = false

func newWriterEvents(string) (*writerEvents, error) {
	return nil, errors.New("watch rules file writers: not supported on this platform")
}

func (w *writerEvents) Close() error { return nil }

package server

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/sluicelabs/sluice/cmd/sluice-rules/internal/store"
	"github.com/sluicelabs/sluice/internal/rulesapi"
)

// current is the served document the process holds, with a channel closed
// when a newer one replaces it (what long-polls wait on).
type current struct {
	version   int64
	doc       []byte
	etag      string
	updatedAt time.Time
	newer     chan struct{}
}

func (s *Server) current() *current {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur
}

// publish makes sv the served document if it is newer than what is
// served, waking every long-poll.
func (s *Server) publish(sv store.Served) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur != nil && sv.Version <= s.cur.version {
		return
	}
	old := s.cur
	s.cur = &current{version: sv.Version, doc: []byte(sv.Document), etag: rulesapi.VersionETag(sv.Version), updatedAt: sv.UpdatedAt, newer: make(chan struct{})}
	s.m.version.Set(float64(sv.Version))
	if old != nil {
		close(old.newer)
	}
}

// refresh loads the stored version if another replica made a newer one.
func (s *Server) refresh(ctx context.Context) error {
	v, err := s.store.Read().ServedVersion(ctx)
	if err != nil {
		return err
	}
	if cur := s.current(); cur != nil && v <= cur.version {
		return nil
	}
	sv, err := s.store.Read().Served(ctx)
	if err != nil {
		return err
	}
	s.publish(sv)
	return nil
}

// waitFor returns how long a request for the served document may be held:
// Prefer: wait=N, or ?wait=N (seconds, or a Go duration), capped.
func waitFor(r *http.Request) time.Duration {
	if secs := rulesapi.ParsePreferWait(r.Header.Get(rulesapi.HeaderPrefer)); secs > 0 {
		return time.Duration(secs) * time.Second
	}
	q := r.URL.Query().Get("wait")
	if q == "" {
		return 0
	}
	if n, err := strconv.ParseInt(q, 10, 64); err == nil && n > 0 {
		return min(time.Duration(n)*time.Second, rulesapi.MaxWait)
	}
	if d, err := time.ParseDuration(q); err == nil && d > 0 {
		return min(d, rulesapi.MaxWait)
	}
	return 0
}

// serveDocument answers GET /rules.yaml: the latest validated version,
// 304 to a matching If-None-Match, and with a wait, holds a matching
// request until a newer version or the wait's end (then 304).
func (s *Server) serveDocument(w http.ResponseWriter, r *http.Request) {
	cur := s.current()
	inm := r.Header.Get("If-None-Match")
	if inm != "" && rulesapi.ETagMatches(inm, cur.etag, true) {
		// Beyond the cap a long-poll is answered at once (as plain
		// polling), so held requests cannot pile up without bound.
		if wait := waitFor(r); wait > 0 && s.held.Load() < s.maxHeld {
			s.m.waiting.Inc()
			s.held.Add(1)
			t := time.NewTimer(wait)
			select {
			case <-cur.newer:
				cur = s.current()
			case <-t.C:
			case <-r.Context().Done():
			case <-s.closing:
			}
			t.Stop()
			s.held.Add(-1)
			s.m.waiting.Dec()
		}
		if rulesapi.ETagMatches(inm, cur.etag, true) {
			s.m.served304.Inc()
			s.docHeaders(w, cur)
			w.WriteHeader(http.StatusNotModified)
			return
		}
	}
	s.m.served200.Inc()
	s.docHeaders(w, cur)
	w.Header().Set("Content-Type", "application/yaml; charset=utf-8")
	w.Header().Set("Content-Length", strconv.Itoa(len(cur.doc)))
	if r.Method == http.MethodHead {
		return
	}
	w.Write(cur.doc)
}

func (s *Server) docHeaders(w http.ResponseWriter, cur *current) {
	h := w.Header()
	h.Set("ETag", cur.etag)
	h.Set(rulesapi.HeaderVersion, strconv.FormatInt(cur.version, 10))
	h.Set("Cache-Control", "no-cache")
	if !cur.updatedAt.IsZero() && cur.updatedAt.Unix() > 0 {
		h.Set("Last-Modified", cur.updatedAt.UTC().Format(http.TimeFormat))
	}
}

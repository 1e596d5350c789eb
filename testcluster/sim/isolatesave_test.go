package sim

import (
	"encoding/gob"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/sluicelabs/sluice/bucket"
)

// Recorded runs kept on disk, so that a benchmark replays a large run's
// nodes (10,000 nodes: half an hour of simulation here) without
// simulating it again: before and after a change to the syncer, or under
// a profiler. The inputs are the run's, so they stay valid while the
// syncer's behaviour does not change.

// savedRun is a run's config and its recorded nodes, in gob's terms.
type savedRun struct {
	Cfg    Config
	Traces []savedTrace
}

type savedTrace struct {
	Slot    int
	Members []memberlist.Node
	Events  []savedEvent
	End     int64
}

type savedEvent struct {
	At     int64
	Kind   uint8
	NS     uint32
	Join   bool
	Msg    []byte
	Member memberlist.Node
}

// saveRun writes s's config and recorded nodes to path.
func saveRun(path string, s *Sim) error {
	run := savedRun{Cfg: s.cfg}
	for _, t := range s.traces {
		st := savedTrace{Slot: t.slot, Members: t.members, End: t.end, Events: make([]savedEvent, len(t.events))}
		for i, e := range t.events {
			st.Events[i] = savedEvent{At: e.at, Kind: uint8(e.kind), NS: uint32(e.ns), Join: e.join, Msg: e.msg, Member: e.member}
		}
		run.Traces = append(run.Traces, st)
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("save the run: %w", err)
	}
	if err := gob.NewEncoder(f).Encode(&run); err != nil {
		f.Close()
		return fmt.Errorf("save the run: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("save the run: %w", err)
	}
	return nil
}

// loadRun reads a run saved by saveRun: a Sim with no nodes, able to
// replay the recorded ones.
func loadRun(path string) (*Sim, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("load the run: %w", err)
	}
	defer f.Close()
	var run savedRun
	if err := gob.NewDecoder(f).Decode(&run); err != nil {
		return nil, fmt.Errorf("load the run %s: %w", path, err)
	}
	s, err := bare(run.Cfg)
	if err != nil {
		return nil, fmt.Errorf("load the run %s: %w", path, err)
	}
	for _, st := range run.Traces {
		t := &trace{slot: st.Slot, members: st.Members, end: st.End, events: make([]traceEvent, len(st.Events))}
		for i, e := range st.Events {
			t.events[i] = traceEvent{at: e.At, kind: traceKind(e.Kind), ns: bucket.Namespace(e.NS), join: e.Join, msg: e.Msg, member: e.Member}
		}
		s.traces = append(s.traces, t)
	}
	return s, nil
}

// recordedRun is a run of cfg with its nodes recorded: loaded from dir if
// a run of the same config was saved there, else run and saved there (dir
// empty: run, not saved).
func recordedRun(tb testing.TB, dir string, cfg Config) *Sim {
	tb.Helper()
	path := ""
	if dir != "" {
		path = filepath.Join(dir, fmt.Sprintf("%s-%s-%d-nodes-%gs-seed-%d.gob", cfg.Scenario, cfg.GossipMode, cfg.Nodes, cfg.Duration.Seconds(), cfg.Seed))
		s, err := loadRun(path)
		if err == nil {
			return s
		}
		if !errors.Is(err, fs.ErrNotExist) {
			tb.Fatal(err)
		}
	}
	s, err := New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	began := time.Now()
	s.Run()
	tb.Logf("%d nodes simulated in %s", cfg.Nodes, time.Since(began).Round(time.Second))
	if path != "" {
		if err := saveRun(path, s); err != nil {
			tb.Fatal(err)
		}
	}
	return s
}

// A saved run loads as it was: its replays send what the run's send.
func TestSavedRunReplaysAsTheRun(t *testing.T) {
	s, err := New(Config{Nodes: 40, Duration: time.Second, Seed: 2, GossipMode: "owner", Scenario: Spread, FirstShare: true})
	if err != nil {
		t.Fatal(err)
	}
	s.Run()
	path := filepath.Join(t.TempDir(), "run.gob")
	if err := saveRun(path, s); err != nil {
		t.Fatal(err)
	}
	l, err := loadRun(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(l.traces) != len(s.traces) || len(l.traces) == 0 {
		t.Fatalf("%d traces loaded, %d saved", len(l.traces), len(s.traces))
	}
	for i, tr := range s.traces {
		if got, want := l.replay(l.traces[i], false).sent, s.replay(tr, false).sent; got != want {
			t.Errorf("slot %d: the loaded replay sent %d packets, the run's %d", tr.slot, got, want)
		}
	}
}

package server

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/cmd/sluice-rules/internal/pgtest"
	"github.com/sluicelabs/sluice/cmd/sluice-rules/internal/store"
	"github.com/sluicelabs/sluice/internal/rulesapi"
)

// TestReplicasOnOnePostgreSQLServeEachOthersVersions: two servers sharing
// a database (replicas behind a load balancer); a change made through one
// is served by the other, and wakes its long-polls, within its refresh
// interval.
func TestReplicasOnOnePostgreSQLServeEachOthersVersions(t *testing.T) {
	dbURL := pgtest.URL(t)
	a := start(t, dbURL)
	ctx := context.Background()
	st, err := store.Open(ctx, dbURL) // a second replica: migrations already done
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	b, err := New(ctx, Config{Store: st, RefreshInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go b.Run(runCtx)
	hb := httptest.NewServer(b.Handler())
	defer func() { b.Drain(); hb.Close() }()

	got := make(chan string, 1)
	go func() {
		doc, _, err := rulesapi.NewClient(hb.URL, "").Served(ctx, `"v0"`, time.Minute)
		if err != nil {
			got <- "error: " + err.Error()
			return
		}
		got <- string(doc)
	}()
	eventually(t, "replica b holds the long-poll", func() bool { return b.held.Load() > 0 })
	pay := a.teamClient(t, "pay")
	if _, err := pay.PutRule(ctx, "pay", "api", "rate: 3/1s", rulesapi.ChangeOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case doc := <-got:
		if !strings.Contains(doc, "pay.api") {
			t.Fatalf("replica b answered %q", doc)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("replica b never served replica a's version")
	}
	// A token issued through one replica works on the other: one database.
	tok, err := a.admin.CreateToken(ctx, "pay", "other")
	if err != nil {
		t.Fatal(err)
	}
	if tr, _, err := rulesapi.NewClient(hb.URL, tok.Secret).TeamRules(ctx, "pay"); err != nil || len(tr.Rules) != 1 {
		t.Fatalf("replica b with a's token: %+v %v", tr, err)
	}
}

// TestHeldLongPollsAreCapped: beyond MaxHeld a long-poll is answered at
// once, as a plain conditional GET.
func TestHeldLongPollsAreCapped(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, "sqlite://"+t.TempDir()+"/rules.db")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	s, err := New(ctx, Config{Store: st, MaxHeld: 1})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s.Handler())
	defer func() { s.Drain(); hs.Close() }()
	c := rulesapi.NewClient(hs.URL, "")
	first := make(chan error, 1)
	go func() { _, _, err := c.Served(ctx, `"v0"`, time.Minute); first <- err }()
	eventually(t, "the first long-poll is held", func() bool { return s.held.Load() == 1 })
	start := time.Now()
	if _, _, err := c.Served(ctx, `"v0"`, time.Minute); err != rulesapi.ErrNotModified {
		t.Fatalf("second long-poll: %v", err)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Fatalf("the second long-poll was held %v beyond the cap", took)
	}
	s.Drain()
	if err := <-first; err != rulesapi.ErrNotModified {
		t.Fatalf("first long-poll after drain: %v", err)
	}
}

package server

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/sluicelabs/sluice/cmd/sluice-rules/internal/store"
)

// TestUIHookIsMountedAtUI: Config.UI sees /ui/... with its prefix, / is
// redirected there, and the API and the served document are the server's.
func TestUIHookIsMountedAtUI(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, "sqlite://"+filepath.Join(t.TempDir(), "rules.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ui := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ui:"+r.URL.Path) })
	s, err := New(ctx, Config{Store: st, UI: ui})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		path, want string
		status     int
	}{
		{"/ui/", "ui:/ui/", 200},
		{"/ui/app.js", "ui:/ui/app.js", 200},
		{"/", "", http.StatusFound},
		{"/rules.yaml", "rules: {}", 200},
	}
	for _, tt := range tests {
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, tt.path, nil))
		if rec.Code != tt.status || (tt.want != "" && rec.Body.String() != tt.want) {
			t.Errorf("GET %s: %d %q; want %d %q", tt.path, rec.Code, rec.Body.String(), tt.status, tt.want)
		}
		if tt.status == http.StatusFound && rec.Header().Get("Location") != "/ui/" {
			t.Errorf("GET %s: Location %q", tt.path, rec.Header().Get("Location"))
		}
	}
	// Without a UI, /ui/ is not served.
	bare, err := New(ctx, Config{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	bare.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/ui/", nil))
	if rec.Code != http.StatusNotFound {
		t.Errorf("GET /ui/ without a UI: %d", rec.Code)
	}
}

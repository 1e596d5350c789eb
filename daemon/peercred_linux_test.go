//go:build linux

package daemon

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/sluicelabs/sluice/clientlib"
	"github.com/sluicelabs/sluice/config"
	"github.com/sluicelabs/sluice/ipc"
)

// The settings' allow-lists reach the server: a client whose uid and gid are
// not listed (root included, when the tests run as root) is refused and
// counted in /metrics; a listed uid is served.
func TestDaemonPeerAllowList(t *testing.T) {
	uid, gid := uint32(os.Getuid()), uint32(os.Getgid())
	for _, tt := range []struct {
		name       string
		uids, gids []uint32
		admit      bool
	}{
		{"own uid listed", []uint32{uid}, nil, true},
		{"neither listed", []uint32{uid + 1}, []uint32{gid + 1}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := config.DefaultSettings()
			s.AllowUIDs, s.AllowGIDs = tt.uids, tt.gids
			d := runDaemon(t, s)

			c, err := clientlib.Dial(context.Background(), clientlib.Options{SocketPath: d.SocketPath(), Timeout: 5 * time.Second})
			if tt.admit {
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				if got := c.Allow(context.Background(), "default", "k"); got.FailedOpen || !got.Allowed {
					t.Fatalf("decision: %+v", got)
				}
			} else {
				var e *ipc.Error
				if !errors.As(err, &e) || e.Code != ipc.CodePeerRefused {
					t.Fatalf("dial: %v, want ERROR code %d", err, ipc.CodePeerRefused)
				}
			}

			parser := expfmt.NewTextParser(model.UTF8Validation)
			families, err := parser.TextToMetricFamilies(strings.NewReader(get(t, d.AdminHandler(), "/metrics").Body.String()))
			if err != nil {
				t.Fatal(err)
			}
			want := 1.0
			if tt.admit {
				want = 0
			}
			if got := counter(t, families, "sluice_ipc_peers_refused_total", nil); got != want {
				t.Fatalf("sluice_ipc_peers_refused_total = %v, want %v", got, want)
			}
		})
	}
}

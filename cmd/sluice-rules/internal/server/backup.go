package server

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"

	"github.com/sluicelabs/sluice/internal/rulesapi"
)

// backup streams a consistent copy of a SQLite database (admin only).
func (s *Server) backup(w http.ResponseWriter, r *http.Request, a actor) error {
	if err := mayAdmin(a); err != nil {
		return err
	}
	if s.store.Dialect() != "sqlite" {
		return errorf(http.StatusBadRequest, rulesapi.CodeBadRequest, "the service backs up SQLite only: back PostgreSQL up with pg_dump")
	}
	dir, err := os.MkdirTemp("", "sluice-rules-backup-")
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "rules.db")
	if err := s.store.Backup(r.Context(), path); err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/vnd.sqlite3")
	w.Header().Set("Content-Disposition", `attachment; filename="sluice-rules-backup.db"`)
	http.ServeFile(w, r, path)
	return nil
}

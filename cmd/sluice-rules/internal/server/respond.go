package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/sluicelabs/sluice/cmd/sluice-rules/internal/ruledoc"
	"github.com/sluicelabs/sluice/cmd/sluice-rules/internal/store"
	"github.com/sluicelabs/sluice/config"
	"github.com/sluicelabs/sluice/internal/rulesapi"
)

// apiError is an error answer decided by a handler.
type apiError struct {
	status int
	detail rulesapi.ErrorDetail
}

func (e *apiError) Error() string { return e.detail.Code + ": " + e.detail.Message }

func errorf(status int, code, format string, args ...any) *apiError {
	return &apiError{status: status, detail: rulesapi.ErrorDetail{Code: code, Message: fmt.Sprintf(format, args...)}}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

// writeError answers err as the API's error shape.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	var ae *apiError
	var inv *ruledoc.InvalidError
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &ae):
	case errors.As(err, &inv):
		s.m.validationFailures.Inc()
		ae = errorf(http.StatusUnprocessableEntity, rulesapi.CodeInvalidRules, "the daemon's parser refused the rules: %d problem(s)", len(inv.Problems))
		ae.detail.Problems = inv.Problems
	case errors.As(err, &mbe):
		ae = errorf(http.StatusRequestEntityTooLarge, rulesapi.CodeTooLarge, "request body over %d bytes", mbe.Limit)
	case errors.Is(err, config.ErrRulesTooLarge):
		s.m.validationFailures.Inc()
		ae = errorf(http.StatusRequestEntityTooLarge, rulesapi.CodeTooLarge, "%v", err)
	case errors.Is(err, store.ErrNotFound):
		ae = errorf(http.StatusNotFound, rulesapi.CodeNotFound, "%v", err)
	case errors.Is(err, store.ErrExists):
		ae = errorf(http.StatusConflict, rulesapi.CodeExists, "%v", err)
	default:
		s.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "error", err)
		ae = errorf(http.StatusInternalServerError, rulesapi.CodeInternal, "internal error (logged)")
	}
	if ae.status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="sluice-rules"`)
	}
	writeJSON(w, ae.status, rulesapi.ErrorBody{Error: ae.detail})
}

// decode reads a JSON body of at most rulesapi.MaxBodyBytes into v,
// refusing unknown fields.
func decode(w http.ResponseWriter, r *http.Request, v any) error {
	body := http.MaxBytesReader(w, r.Body, rulesapi.MaxBodyBytes)
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return err
		}
		return errorf(http.StatusBadRequest, rulesapi.CodeBadRequest, "read the JSON body: %v", err)
	}
	return nil
}

// boolQuery reads a true/false query parameter (absent: false).
func boolQuery(r *http.Request, name string) (bool, error) {
	switch v := strings.ToLower(r.URL.Query().Get(name)); v {
	case "", "false", "0", "no":
		return false, nil
	case "true", "1", "yes":
		return true, nil
	default:
		return false, errorf(http.StatusBadRequest, rulesapi.CodeBadRequest, "%s=%q: want true or false", name, v)
	}
}

package rulesapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestClientSendsTokenConditionsAndDecodesErrors(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if got := r.Header.Get("Authorization"); got != "Bearer tok" {
			t.Errorf("Authorization = %q", got)
		}
		if r.URL.Path != "/v1/teams/pay/rules/api" || r.URL.Query().Get("confirm") != "true" || r.Header.Get("If-Match") != `"v3"` {
			t.Errorf("request %s %s If-Match %q", r.Method, r.URL, r.Header.Get("If-Match"))
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusPreconditionFailed)
		json.NewEncoder(w).Encode(ErrorBody{Error: ErrorDetail{Code: CodeStale, Message: "changed meanwhile", Current: `"v4"`}})
	}))
	defer srv.Close()
	c := NewClient(srv.URL, "tok")
	_, err := c.PutRule(context.Background(), "pay", "api", "rate: 1/1s\n", ChangeOptions{IfMatch: `"v3"`, Confirm: true})
	var apiErr *APIError
	if !errors.As(err, &apiErr) || apiErr.Status != http.StatusPreconditionFailed || apiErr.Code != CodeStale || apiErr.Current != `"v4"` {
		t.Fatalf("PutRule error = %#v", err)
	}
}

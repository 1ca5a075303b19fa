package http_test

import (
	"encoding/json"
	"io"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"

	bhttp "github.com/bothyhq/bothy/http"
)

// TestOpenAPI_Routes fails when a route of the server is missing from the
// OpenAPI document served at /v1/openapi.json, or the document describes a
// route the server does not have, or disagrees about a route's scope.
func TestOpenAPI_Routes(t *testing.T) {
	s := bhttp.NewServer(nil, nil, bhttp.Options{})
	srv := httptest.NewServer(s)
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL + "/v1/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var doc struct {
		OpenAPI string `json:"openapi"`
		Paths   map[string]map[string]struct {
			OperationID string           `json:"operationId"`
			Scope       string           `json:"x-bothy-scope"`
			Security    []map[string]any `json:"security"`
			Responses   map[string]any   `json:"responses"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	if doc.OpenAPI != "3.1.0" {
		t.Errorf("openapi = %q, want 3.1.0", doc.OpenAPI)
	}

	documented := map[string]bool{}
	ops := map[string]bool{}
	for p, methods := range doc.Paths {
		for m, op := range methods {
			key := strings.ToUpper(m) + " " + p
			documented[key] = true
			if op.OperationID == "" || ops[op.OperationID] {
				t.Errorf("%s: missing or duplicate operationId %q", key, op.OperationID)
			}
			ops[op.OperationID] = true
			if len(op.Responses) == 0 {
				t.Errorf("%s: no responses", key)
			}
		}
	}
	served := map[string]bool{}
	for _, rt := range s.Routes() {
		// OpenAPI has no "rest of the path" parameter: {path...} is {path}.
		key := rt.Method + " " + strings.ReplaceAll(rt.Pattern, "...}", "}")
		served[key] = true
		if !documented[key] {
			t.Errorf("route %s %s is missing from openapi.json", rt.Method, rt.Pattern)
			continue
		}
		op := doc.Paths[strings.SplitN(key, " ", 2)[1]][strings.ToLower(rt.Method)]
		if op.Scope != rt.Scope {
			t.Errorf("%s: openapi scope %q, route scope %q", key, op.Scope, rt.Scope)
		}
		if (rt.Scope == "") != (op.Security != nil && len(op.Security) == 0) {
			t.Errorf("%s: openapi security %v does not match the route's scope %q", key, op.Security, rt.Scope)
		}
	}
	var extra []string
	for key := range documented {
		if !served[key] {
			extra = append(extra, key)
		}
	}
	sort.Strings(extra)
	for _, key := range extra {
		t.Errorf("openapi.json documents %s, which the server does not route", key)
	}
}

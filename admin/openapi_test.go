package admin_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/throttler/throttler/admin"
)

// openAPI is the part of the OpenAPI document the test reads.
type openAPI struct {
	Paths      map[string]map[string]operation `json:"paths"`
	Components struct {
		Schemas map[string]schema `json:"schemas"`
	} `json:"components"`
}

type operation struct {
	Responses map[string]struct {
		Content map[string]struct {
			Schema schema `json:"schema"`
		} `json:"content"`
	} `json:"responses"`
}

type schema struct {
	Ref        string            `json:"$ref"`
	Type       string            `json:"type"`
	Required   []string          `json:"required"`
	Properties map[string]schema `json:"properties"`
	Items      *schema           `json:"items"`
	Nullable   bool              `json:"nullable"`
}

// readOpenAPI fetches the document from the server itself.
func readOpenAPI(t *testing.T, h http.Handler) openAPI {
	t.Helper()
	rec := do(t, h, "GET", "/api/v1/openapi.json", "", "Bearer "+token)
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /api/v1/openapi.json: %d", rec.Code)
	}
	var doc openAPI
	if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil {
		t.Fatalf("the OpenAPI document is not JSON: %v", err)
	}
	return doc
}

// TestOpenAPIListsEveryRoute: the document and the server have the same
// routes, each documenting 401.
func TestOpenAPIListsEveryRoute(t *testing.T) {
	t.Parallel()
	f := &fakeFleet{}
	srv := admin.New(f.config(token))
	doc := readOpenAPI(t, srv)
	var documented []string
	for path, ops := range doc.Paths {
		for method, op := range ops {
			documented = append(documented, strings.ToUpper(method)+" /api/v1"+path)
			if _, ok := op.Responses["401"]; !ok {
				t.Errorf("%s %s does not document 401", method, path)
			}
		}
	}
	served := srv.Routes()
	slices.Sort(documented)
	slices.Sort(served)
	if !slices.Equal(documented, served) {
		t.Fatalf("documented routes:\n%s\nserved routes:\n%s", strings.Join(documented, "\n"), strings.Join(served, "\n"))
	}
}

// TestOpenAPIMatchesAnswers: every route's answer, good and bad, has a
// status the document lists for it, and a body with every property its
// schema requires.
func TestOpenAPIMatchesAnswers(t *testing.T) {
	t.Parallel()
	f := &fakeFleet{rows: []admin.TenantRow{{Tenant: "acme", Deferred: 3, Binding: "5/s"}}}
	srv := admin.New(f.config(token))
	doc := readOpenAPI(t, srv)
	for _, route := range srv.Routes() {
		method, path, body := sample(route)
		pattern := strings.TrimPrefix(strings.SplitN(route, " ", 2)[1], "/api/v1")
		op := doc.Paths[pattern][strings.ToLower(method)]
		cases := []struct{ path, body string }{{path, body}}
		// A bad request of each route that takes input.
		switch {
		case strings.Contains(pattern, "{tenant}"):
			cases = append(cases, struct{ path, body string }{strings.Replace(path, "acme", "a%20b", 1), body})
		case strings.Contains(pattern, "{level}"):
			cases = append(cases, struct{ path, body string }{strings.Replace(path, "_global", "acme", 1), body},
				struct{ path, body string }{strings.Replace(path, "_global", "group.a%20b", 1), body})
		case strings.Contains(pattern, "{id}"):
			cases = append(cases, struct{ path, body string }{strings.Replace(path, "/7", "/x", 1), body}, struct{ path, body string }{strings.Replace(path, "/7", "/8", 1), body})
		case method == "POST":
			cases = append(cases, struct{ path, body string }{path, `{"nope": 1}`})
		}
		for _, c := range cases {
			rec := do(t, srv, method, c.path, c.body, "Bearer "+token)
			resp, ok := op.Responses[strconv.Itoa(rec.Code)]
			if !ok {
				t.Errorf("%s %s answered %d, which the document does not list", method, c.path, rec.Code)
				continue
			}
			media, ok := resp.Content["application/json"]
			if !ok {
				continue
			}
			var v any
			if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
				t.Errorf("%s %s: not JSON: %v", method, c.path, err)
				continue
			}
			for _, p := range conform(doc, media.Schema, v, "") {
				t.Errorf("%s %s (%d): %s", method, c.path, rec.Code, p)
			}
		}
	}
}

// conform lists how v departs from s: a missing required property, or a
// value of another JSON type.
func conform(doc openAPI, s schema, v any, at string) []string {
	if s.Ref != "" {
		s = doc.Components.Schemas[strings.TrimPrefix(s.Ref, "#/components/schemas/")]
	}
	if v == nil {
		if s.Nullable || s.Type == "" {
			return nil
		}
		return []string{at + ": null, want " + s.Type}
	}
	var out []string
	switch s.Type {
	case "object":
		m, ok := v.(map[string]any)
		if !ok {
			return []string{at + ": not an object"}
		}
		for _, r := range s.Required {
			if _, ok := m[r]; !ok {
				out = append(out, at+"."+r+": required, missing")
			}
		}
		for k, ps := range s.Properties {
			if pv, ok := m[k]; ok {
				out = append(out, conform(doc, ps, pv, at+"."+k)...)
			}
		}
	case "array":
		a, ok := v.([]any)
		if !ok {
			return []string{at + ": not an array"}
		}
		for i, e := range a {
			if s.Items != nil {
				out = append(out, conform(doc, *s.Items, e, at+"["+strconv.Itoa(i)+"]")...)
			}
		}
	case "string":
		if _, ok := v.(string); !ok {
			out = append(out, at+": not a string")
		}
	case "integer", "number":
		if _, ok := v.(float64); !ok {
			out = append(out, at+": not a number")
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			out = append(out, at+": not a boolean")
		}
	}
	return out
}

package admin_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/throttler/throttler/admin"
	"github.com/throttler/throttler/internal/testenv"
)

const token = "test-token-0123456789"

// sample turns a route pattern into a request path and a body that the
// handler accepts.
func sample(route string) (method, path, body string) {
	method, path, _ = strings.Cut(route, " ")
	path = strings.NewReplacer("{tenant}", "acme", "{level}", "_global", "{id}", "7").Replace(path)
	switch {
	case strings.HasSuffix(path, "/limits") && method == "PUT":
		body = `{"spec": "50/s:100"}`
	case strings.HasPrefix(path, "/api/v1/dlq/") && method == "POST":
		body = `{"ids": [7]}`
	case method == "POST":
		body = `{}`
	}
	return method, path, body
}

// do sends one request to h with auth as the Authorization header ("" for
// none).
func do(t *testing.T, h http.Handler, method, path, body, auth string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// TestEveryRouteRefusesMissingOrWrongToken: every route of the API, and the
// console's page, answer 401 to a request without the token, with a wrong
// one, with the token in another scheme, or with a prefix of it; the
// answer holds none of the data, and nothing changes.
func TestEveryRouteRefusesMissingOrWrongToken(t *testing.T) {
	t.Parallel()
	f := &fakeFleet{rows: []admin.TenantRow{{Tenant: "acme", Deferred: 9}}}
	srv := admin.New(f.config(token))
	for _, route := range srv.Routes() {
		method, path, body := sample(route)
		for _, auth := range []string{"", "Bearer wrong-token-0123456789", "Basic " + token, "Bearer " + token[:len(token)-1], "Bearer " + token + "x", token} {
			rec := do(t, srv, method, path, body, auth)
			if rec.Code != http.StatusUnauthorized {
				t.Errorf("%s with Authorization %q: status %d, want 401", route, auth, rec.Code)
			}
			if b := rec.Body.String(); strings.Contains(b, "acme") || strings.Contains(b, "5/s") || strings.Contains(b, "openapi") {
				t.Errorf("%s with Authorization %q: the answer shows data: %s", route, auth, b)
			}
		}
	}
	if len(f.changes) != 0 || f.tops != 0 {
		t.Fatalf("refused requests reached the fleet: %d top views, changes %q", f.tops, f.changes)
	}
	rec := do(t, srv, "GET", "/", "", "Bearer wrong-token-0123456789")
	if rec.Code != http.StatusUnauthorized || !strings.Contains(rec.Body.String(), `data-authed="0"`) {
		t.Fatalf("console page with a wrong token: %d, want 401 and the page marked unauthenticated", rec.Code)
	}
	rec = do(t, srv, "GET", "/", "", "Bearer "+token)
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `data-authed="1"`) {
		t.Fatalf("console page with the token: %d, want 200 and the page marked authenticated", rec.Code)
	}
	if rec := do(t, srv, "GET", "/api/v1/nothing", "", ""); rec.Code != http.StatusUnauthorized {
		t.Fatalf("unknown route without a token: %d, want 401", rec.Code)
	}
}

// TestPutLimitsBadSpecChangesNothing: a spec the parser refuses answers
// 400 with the parser's message; a body without a spec is refused too.
func TestPutLimitsBadSpecChangesNothing(t *testing.T) {
	t.Parallel()
	f := &fakeFleet{}
	srv := admin.New(f.config(token))
	rec := do(t, srv, "PUT", "/api/v1/tenants/acme/limits", `{"spec": "bad"}`, "Bearer "+token)
	if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "the parser's message") {
		t.Fatalf("bad spec: %d %s, want 400 with the parser's message", rec.Code, rec.Body)
	}
	for _, body := range []string{`{}`, `{"spec": 5}`, `{"spec": "1/s", "extra": 1}`, `[`} {
		if rec := do(t, srv, "PUT", "/api/v1/tenants/acme/limits", body, "Bearer "+token); rec.Code != http.StatusBadRequest {
			t.Errorf("body %s: %d, want 400", body, rec.Code)
		}
	}
	if rec := do(t, srv, "PUT", "/api/v1/tenants/a%20b/limits", `{"spec":"1/s"}`, "Bearer "+token); rec.Code != http.StatusBadRequest {
		t.Errorf("bad tenant: %d, want 400", rec.Code)
	}
	if len(f.changes) != 0 {
		t.Fatalf("refused writes changed %q", f.changes)
	}
}

// TestChangesAreLogged: every request that changes something logs what
// changed; reading and dry runs log nothing.
func TestChangesAreLogged(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	f := &fakeFleet{}
	cfg := f.config(token)
	cfg.Logger = slog.New(slog.NewTextHandler(&buf, nil))
	srv := admin.New(cfg)
	auth := "Bearer " + token
	for _, c := range []struct{ method, path, body, want string }{
		{"PUT", "/api/v1/tenants/acme/limits", `{"spec": "9/s"}`, `msg="admin: limits changed" tenant=acme before=5/s:5 after=9/s revision=4`},
		{"POST", "/api/v1/tenants/acme/pause", `{"reason": "incident 42", "for": "1h"}`, `msg="admin: tenant paused" tenant=acme reason="incident 42" for=1h0m0s`},
		{"POST", "/api/v1/tenants/acme/resume", ``, `msg="admin: tenant resumed" tenant=acme`},
		{"POST", "/api/v1/tenants/acme/purge", `{"older_than": "10m"}`, `msg="admin: tenant purged" tenant=acme older_than=10m0s`},
		{"POST", "/api/v1/dlq/replay", `{"ids": [7, 8]}`, `msg="admin: dead letters replayed" ids="[7 8]"`},
		{"POST", "/api/v1/dlq/purge", `{"tenant": "acme"}`, `msg="admin: dead letters purged" ids=[] tenant=acme`},
	} {
		buf.Reset()
		if rec := do(t, srv, c.method, c.path, c.body, auth); rec.Code != http.StatusOK {
			t.Fatalf("%s %s: %d %s", c.method, c.path, rec.Code, rec.Body)
		}
		if !strings.Contains(buf.String(), c.want) {
			t.Errorf("%s %s logged %q, want %q", c.method, c.path, buf.String(), c.want)
		}
	}
	buf.Reset()
	do(t, srv, "POST", "/api/v1/tenants/acme/purge", `{"dry_run": true}`, auth)
	do(t, srv, "GET", "/api/v1/tenants/acme", ``, auth)
	if buf.Len() != 0 {
		t.Fatalf("a dry run and a read logged %q", buf.String())
	}
}

// TestPauseUntilSinceAndScheme: the API takes what the CLI takes: a
// pause's end as a time (until), durations in whole days (7d), a dead
// letters' since as a duration back from now or a time; and the Bearer scheme in any case (RFC 9110).
func TestPauseUntilSinceAndScheme(t *testing.T) {
	t.Parallel()
	f := &fakeFleet{}
	srv := admin.New(f.config(token))
	auth := "Bearer " + token
	if rec := do(t, srv, "POST", "/api/v1/tenants/acme/pause", `{"reason": "r", "until": "2030-01-02T15:04:05Z"}`, auth); rec.Code != http.StatusOK {
		t.Fatalf("pause with until: %d %s", rec.Code, rec.Body)
	}
	if len(f.changes) != 1 || f.changes[0] != `pause acme "r" until 2030-01-02T15:04:05Z` {
		t.Fatalf("the fleet was asked %q, want the pause until 2030-01-02T15:04:05Z", f.changes)
	}
	if rec := do(t, srv, "POST", "/api/v1/tenants/acme/pause", `{"until": "tomorrow"}`, auth); rec.Code != http.StatusBadRequest {
		t.Errorf("pause until tomorrow: %d, want 400", rec.Code)
	}
	// Whole days, as the CLI's --for, --older-than and --since take them.
	if rec := do(t, srv, "POST", "/api/v1/tenants/acme/pause", `{"reason": "r", "for": "7d"}`, auth); rec.Code != http.StatusOK {
		t.Fatalf("pause for 7d: %d %s", rec.Code, rec.Body)
	}
	if got := f.changes[len(f.changes)-1]; got != `pause acme "r" 168h0m0s` {
		t.Fatalf("the fleet was asked %q, want a pause of 168h", got)
	}
	if rec := do(t, srv, "POST", "/api/v1/tenants/acme/purge", `{"older_than": "2d", "dry_run": true}`, auth); rec.Code != http.StatusOK {
		t.Fatalf("purge older than 2d: %d %s", rec.Code, rec.Body)
	}
	for since, want := range map[string]int{"1h": http.StatusOK, "90s": http.StatusOK, "7d": http.StatusOK, "7.5d": http.StatusBadRequest, "2026-01-02T15:04:05Z": http.StatusOK, "yesterday": http.StatusBadRequest, "-1h": http.StatusBadRequest} {
		if rec := do(t, srv, "GET", "/api/v1/dlq?since="+since, ``, auth); rec.Code != want {
			t.Errorf("GET /dlq?since=%s: %d, want %d", since, rec.Code, want)
		}
	}
	for _, scheme := range []string{"bearer ", "BEARER "} {
		if rec := do(t, srv, "GET", "/api/v1/tenants", ``, scheme+token); rec.Code != http.StatusOK {
			t.Errorf("Authorization %q+token: %d, want 200", scheme, rec.Code)
		}
	}
}

// TestEmptySelectionRefused: replaying or purging dead letters needs a
// selection; an empty body selects none rather than all.
func TestEmptySelectionRefused(t *testing.T) {
	t.Parallel()
	f := &fakeFleet{}
	srv := admin.New(f.config(token))
	for _, path := range []string{"/api/v1/dlq/replay", "/api/v1/dlq/purge"} {
		if rec := do(t, srv, "POST", path, `{}`, "Bearer "+token); rec.Code != http.StatusBadRequest {
			t.Errorf("%s with {}: %d, want 400", path, rec.Code)
		}
		if rec := do(t, srv, "POST", path, `{"all": true}`, "Bearer "+token); rec.Code != http.StatusOK {
			t.Errorf("%s with all: %d, want 200", path, rec.Code)
		}
	}
	if rec := do(t, srv, "GET", "/api/v1/dlq/8", ``, "Bearer "+token); rec.Code != http.StatusNotFound {
		t.Errorf("a missing dead letter: %d, want 404", rec.Code)
	}
}

// TestWrongMethodAnswers405: a route's path with a method it does not take
// answers 405 with the methods it does (Allow), as JSON; a path no route
// has answers 404, as JSON too, in the API or outside it.
func TestWrongMethodAnswers405(t *testing.T) {
	t.Parallel()
	srv := admin.New((&fakeFleet{}).config(token))
	for _, c := range []struct{ method, path, allow string }{
		{"PATCH", "/api/v1/tenants/acme/limits", "DELETE, GET, PUT"},
		{"GET", "/api/v1/tenants/acme/pause", "POST"},
		{"POST", "/api/v1/tenants", "GET"},
	} {
		rec := do(t, srv, c.method, c.path, ``, "Bearer "+token)
		if rec.Code != http.StatusMethodNotAllowed || rec.Header().Get("Allow") != c.allow {
			t.Errorf("%s %s: %d, Allow %q; want 405, Allow %q", c.method, c.path, rec.Code, rec.Header().Get("Allow"), c.allow)
		}
		var body struct{ Error string }
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || !strings.Contains(body.Error, c.method) {
			t.Errorf("%s %s: body %q, want a JSON error naming the method", c.method, c.path, rec.Body)
		}
	}
	for path, auth := range map[string]string{"/api/v1/nothing/here": "Bearer " + token, "/nothing/here": ""} {
		rec := do(t, srv, "GET", path, ``, auth)
		var body struct{ Error string }
		if rec.Code != http.StatusNotFound || json.Unmarshal(rec.Body.Bytes(), &body) != nil || !strings.Contains(body.Error, path) {
			t.Errorf("GET %s, a path no route has: %d %q, want 404 with a JSON error naming it", path, rec.Code, rec.Body)
		}
	}
	if rec := do(t, srv, "POST", "/", ``, ""); rec.Code != http.StatusMethodNotAllowed || rec.Header().Get("Allow") != "GET" {
		t.Errorf("POST /: %d, Allow %q; want 405, Allow GET", rec.Code, rec.Header().Get("Allow"))
	}
	if rec := do(t, srv, "PATCH", "/api/v1/tenants/acme/limits", ``, ""); rec.Code != http.StatusUnauthorized {
		t.Errorf("a wrong method without the token: %d, want 401 first", rec.Code)
	}
}

// TestTenantsFilterSortPage: GET /tenants filters by name, sorts by any
// column and pages, and its totals add up every tenant.
func TestTenantsFilterSortPage(t *testing.T) {
	t.Parallel()
	f := &fakeFleet{rows: []admin.TenantRow{
		{Tenant: "acme", Admitted: 5, Deferred: 50, Naked: 10, Binding: "5/s"},
		{Tenant: "globex", Admitted: 1, Moved: 3},
		{Tenant: "acme-eu", Admitted: 2, Parked: 1, DeadLetters: 2},
	}}
	srv := admin.New(f.config(token))
	get := func(query string) (page struct {
		Tenants, Matched int
		Rows             []admin.TenantRow
		Totals           struct {
			Admitted float64 `json:"admitted_per_s"`
			Waiting  int64
		}
	}) {
		rec := do(t, srv, "GET", "/api/v1/tenants?"+query, "", "Bearer "+token)
		if rec.Code != http.StatusOK {
			t.Fatalf("?%s: %d %s", query, rec.Code, rec.Body)
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &page); err != nil {
			t.Fatal(err)
		}
		return page
	}
	names := func(rows []admin.TenantRow) string {
		var n []string
		for _, r := range rows {
			n = append(n, r.Tenant)
		}
		return strings.Join(n, ",")
	}
	if p := get(""); names(p.Rows) != "acme,globex,acme-eu" || p.Tenants != 3 || p.Totals.Admitted != 8 || p.Totals.Waiting != 14 {
		t.Errorf("default (waiting, desc): %s, %d tenants, totals %+v", names(p.Rows), p.Tenants, p.Totals)
	}
	if p := get("q=ACME&sort=tenant&order=asc"); names(p.Rows) != "acme,acme-eu" || p.Matched != 2 {
		t.Errorf("filtered: %s (%d matched)", names(p.Rows), p.Matched)
	}
	if p := get("sort=admitted&order=asc&offset=1&limit=1"); names(p.Rows) != "acme-eu" || p.Matched != 3 {
		t.Errorf("paged: %s", names(p.Rows))
	}
	for col, want := range map[string]string{"moved": "globex", "parked": "acme-eu", "nakd": "acme", "paused": ""} {
		if p := get("sort=" + col + "&limit=1"); col != "paused" && names(p.Rows) != want {
			t.Errorf("sorted by %s: %s first, want %s", col, names(p.Rows), want)
		}
	}
	if p := get("name=globex"); names(p.Rows) != "globex" {
		t.Errorf("by name: %s", names(p.Rows))
	}
	for _, q := range []string{"sort=nope", "order=up", "limit=0", "limit=1001", "offset=-1"} {
		if rec := do(t, srv, "GET", "/api/v1/tenants?"+q, "", "Bearer "+token); rec.Code != http.StatusBadRequest {
			t.Errorf("?%s: %d, want 400", q, rec.Code)
		}
	}
}

// TestTopGatheredOncePerInterval: however many requests come, the fleet
// view is gathered at most once an interval; a stale view is served at
// once while a new one is gathered.
func TestTopGatheredOncePerInterval(t *testing.T) {
	t.Parallel()
	f := &fakeFleet{rows: []admin.TenantRow{{Tenant: "acme"}}}
	cfg := f.config(token)
	var now atomic.Int64
	now.Store(2000)
	cfg.Now = func() time.Time { return time.Unix(now.Load(), 0) }
	srv := admin.New(cfg)
	tops := func() int {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.tops
	}
	for range 20 {
		do(t, srv, "GET", "/api/v1/tenants", "", "Bearer "+token)
	}
	if n := tops(); n != 1 {
		t.Fatalf("20 requests within the interval gathered %d views, want 1", n)
	}
	now.Add(2)
	if rec := do(t, srv, "GET", "/api/v1/tenants", "", "Bearer "+token); rec.Code != http.StatusOK {
		t.Fatalf("a stale view: %d, want 200 at once", rec.Code)
	}
	testenv.Eventually(t, 5*time.Second, "a new view gathered after the interval", func() bool { return tops() == 2 })
}

// TestNilPortsAnswer501: a build without an operation says so.
func TestNilPortsAnswer501(t *testing.T) {
	t.Parallel()
	srv := admin.New(admin.Config{Token: token})
	for _, route := range srv.Routes() {
		method, path, body := sample(route)
		rec := do(t, srv, method, path, body, "Bearer "+token)
		switch {
		case strings.HasSuffix(path, "/fleet") || strings.HasSuffix(path, "/openapi.json"):
			if rec.Code != http.StatusOK {
				t.Errorf("%s: %d, want 200", route, rec.Code)
			}
		case rec.Code != http.StatusNotImplemented:
			t.Errorf("%s: %d, want 501", route, rec.Code)
		}
	}
}

// TestListenRefusesNonLoopbackWithoutToken: without a token only a
// loopback address is bound.
func TestListenRefusesNonLoopbackWithoutToken(t *testing.T) {
	t.Parallel()
	for _, addr := range []string{":0", "0.0.0.0:0", "[::]:0", "192.0.2.1:0"} {
		ln, err := admin.Listen(addr, "")
		if !errors.Is(err, admin.ErrNeedsToken) {
			if ln != nil {
				_ = ln.Close()
			}
			t.Errorf("Listen(%q) without a token: %v, want ErrNeedsToken", addr, err)
		}
	}
	for _, addr := range []string{"127.0.0.1:0", "localhost:0"} {
		ln, err := admin.Listen(addr, "")
		if err != nil {
			t.Errorf("Listen(%q) without a token: %v", addr, err)
			continue
		}
		_ = ln.Close()
	}
	ln, err := admin.Listen(":0", token)
	if err != nil {
		t.Fatalf("Listen(:0) with a token: %v", err)
	}
	_ = ln.Close()
}

// TestConsoleAssetsEmbedded: the page's scripts and styles are served
// from the binary, with no reference to another host.
func TestConsoleAssetsEmbedded(t *testing.T) {
	t.Parallel()
	srv := admin.New(admin.Config{Token: token})
	page := do(t, srv, "GET", "/", "", "Bearer "+token).Body.String()
	for _, asset := range []string{"/assets/console.js", "/assets/console.css"} {
		if !strings.Contains(page, asset) {
			t.Errorf("the page does not load %s", asset)
		}
		rec := do(t, srv, "GET", asset, "", "")
		b, _ := io.ReadAll(rec.Body)
		if rec.Code != http.StatusOK || len(b) < 100 {
			t.Errorf("%s: %d, %d bytes", asset, rec.Code, len(b))
		}
		if strings.Contains(string(b), "http://") || strings.Contains(string(b), "https://") {
			t.Errorf("%s refers to another host", asset)
		}
	}
	if strings.Contains(page, "http://") || strings.Contains(page, "https://") {
		t.Error("the page refers to another host")
	}
}

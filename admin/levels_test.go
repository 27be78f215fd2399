package admin_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/throttler/throttler/admin"
	"github.com/throttler/throttler/internal/inspect"
)

// TestInspectLevel: GET /levels/{level} asks the fleet for the level its
// key names, _global or group.NAME, and answers its report; a key that
// names no level, or no valid group, is refused with 400 before the fleet
// is asked.
func TestInspectLevel(t *testing.T) {
	t.Parallel()
	f := &fakeFleet{}
	srv := admin.New(f.config(token))
	for path, want := range map[string]string{"/api/v1/levels/_global": "_global", "/api/v1/levels/group.org-1": "group.org-1"} {
		rec := do(t, srv, "GET", path, "", "Bearer "+token)
		var rep inspect.LevelReport
		if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &rep) != nil {
			t.Fatalf("GET %s: %d %s", path, rec.Code, rec.Body)
		}
		if rep.Level != want || rep.Queued != 7 || len(rep.NextInLine) != 2 {
			t.Errorf("GET %s: %+v, want the report of %s", path, rep, want)
		}
	}
	for _, path := range []string{"/api/v1/levels/acme", "/api/v1/levels/group.", "/api/v1/levels/group.a.b", "/api/v1/levels/_default"} {
		if rec := do(t, srv, "GET", path, "", "Bearer "+token); rec.Code != http.StatusBadRequest {
			t.Errorf("GET %s: %d, want 400", path, rec.Code)
		}
	}
	cfg := f.config(token)
	cfg.Inspector = nil
	if rec := do(t, admin.New(cfg), "GET", "/api/v1/levels/_global", "", "Bearer "+token); rec.Code != http.StatusNotImplemented {
		t.Errorf("without an inspector: %d, want 501", rec.Code)
	}
}

// TestListLevels: GET /levels answers every level the fleet reports, under
// "levels"; without an inspector, 501.
func TestListLevels(t *testing.T) {
	t.Parallel()
	f := &fakeFleet{}
	srv := admin.New(f.config(token))
	rec := do(t, srv, "GET", "/api/v1/levels", "", "Bearer "+token)
	var got struct {
		Levels []inspect.LevelReport `json:"levels"`
	}
	if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &got) != nil {
		t.Fatalf("GET /levels: %d %s", rec.Code, rec.Body)
	}
	if len(got.Levels) != 1 || got.Levels[0].Level != "_global" || got.Levels[0].Queued != 7 {
		t.Errorf("GET /levels: %+v, want the global level's report", got)
	}
	cfg := f.config(token)
	cfg.Inspector = nil
	if rec := do(t, admin.New(cfg), "GET", "/api/v1/levels", "", "Bearer "+token); rec.Code != http.StatusNotImplemented {
		t.Errorf("without an inspector: %d, want 501", rec.Code)
	}
}

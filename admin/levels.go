package admin

import (
	"fmt"
	"net/http"

	"github.com/throttler/throttler/internal/inspect"
	"github.com/throttler/throttler/limits"
)

// listLevels answers GET /levels: every limit above the tenants the fleet
// knows, as inspectLevel reports one.
func (s *Server) listLevels(w http.ResponseWriter, r *http.Request) error {
	if s.cfg.Inspector == nil {
		return fmt.Errorf("inspect: %w", errUnavailable)
	}
	reps, err := s.cfg.Inspector.InspectLevels(r.Context())
	if err != nil {
		return fmt.Errorf("inspecting the levels: %w", err)
	}
	return writeJSON(w, http.StatusOK, levelList{Levels: reps})
}

// levelList is GET /levels' answer.
type levelList struct {
	Levels []inspect.LevelReport `json:"levels"`
}

// inspectLevel answers GET /levels/{level}, {level} being "_global" or
// "group.NAME" (the level's key in the limits bucket): throttler inspect
// --global's or --group NAME's report.
func (s *Server) inspectLevel(w http.ResponseWriter, r *http.Request) error {
	key := r.PathValue("level")
	lv, ok, err := limits.LevelKey(key)
	if !ok {
		err = fmt.Errorf("%q names no level: want _global or group.NAME", key)
	}
	if err != nil {
		return fmt.Errorf("%w: %v", ErrBadInput, err)
	}
	if s.cfg.Inspector == nil {
		return fmt.Errorf("inspect: %w", errUnavailable)
	}
	rep, err := s.cfg.Inspector.InspectLevel(r.Context(), lv)
	if err != nil {
		return fmt.Errorf("inspecting %s: %w", key, err)
	}
	return writeJSON(w, http.StatusOK, rep)
}

package admin

import (
	"net/http"
	"time"

	"github.com/throttler/throttler/internal/rollcall"
)

// fleetView is the answer of GET /fleet.
type fleetView struct {
	At time.Time `json:"at"`
	// Version is the answering worker's build.
	Version string `json:"version"`
	// Workers are those that answered the roll call; nil when the roll
	// call is not available, WorkersError says why it failed.
	Workers      []rollcall.Worker `json:"workers"`
	WorkersError string            `json:"workers_error,omitempty"`
	// Totals add up the fleet view's tenants; TotalsError says why they
	// are missing.
	Tenants     int    `json:"tenants"`
	Totals      totals `json:"totals"`
	TotalsError string `json:"totals_error,omitempty"`
}

// fleet answers GET /fleet: the workers that are up and the fleet's
// totals. A part that fails is reported in the answer, so that the page
// shows what it can.
func (s *Server) fleet(w http.ResponseWriter, r *http.Request) error {
	v := fleetView{At: s.cfg.Now().UTC(), Version: s.cfg.Version, Workers: []rollcall.Worker{}}
	if s.cfg.Workers == nil {
		v.WorkersError = errUnavailable.Error()
	} else if ws, err := s.cfg.Workers.Workers(r.Context()); err != nil {
		v.WorkersError = err.Error()
	} else if ws != nil {
		v.Workers = ws
	}
	if s.top == nil {
		v.TotalsError = "the fleet view (throttler top): " + errUnavailable.Error()
	} else if top, err := s.top.get(r.Context()); err != nil {
		v.TotalsError = err.Error()
	} else {
		v.Tenants = len(top.Rows)
		for _, row := range top.Rows {
			v.Totals.Admitted += row.Admitted
			v.Totals.Deferred += row.Deferred
			v.Totals.Waiting += row.Waiting()
			v.Totals.DeadLetters += row.DeadLetters
		}
	}
	return writeJSON(w, http.StatusOK, v)
}

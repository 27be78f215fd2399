package admin

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/throttler/throttler/internal/ops"
	"github.com/throttler/throttler/tenant"
)

// defaultDLQList caps GET /dlq's answer unless ?limit= says otherwise.
const defaultDLQList = 500

// filterOf reads and checks a dead-letter filter.
func filterOf(tnt, reason, since string, limit int) (DeadLetterFilter, error) {
	f := DeadLetterFilter{Tenant: tnt, Reason: reason, Limit: limit}
	if tnt != "" && tnt != tenant.Invalid {
		if err := tenant.Validate(tnt); err != nil {
			return f, fmt.Errorf("%w: tenant: %v", ErrBadInput, err)
		}
	}
	if since != "" {
		t, err := sinceTime(since, time.Now())
		if err != nil {
			return f, err
		}
		f.Since = t
	}
	return f, nil
}

// sinceTime reads since as the CLI's --since does, a duration back from
// now (1h), or as an RFC 3339 time.
func sinceTime(since string, now time.Time) (time.Time, error) {
	if d, err := ops.ParseDuration(since); err == nil && d > 0 {
		return now.Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339, since)
	if err != nil {
		return time.Time{}, fmt.Errorf("%w: since %q: want a duration back from now such as 1h or 7d, or an RFC 3339 time such as 2026-01-02T15:04:05Z", ErrBadInput, since)
	}
	return t, nil
}

// listDeadLetters answers GET /dlq?tenant=&reason=&since=&limit=.
func (s *Server) listDeadLetters(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	limit, err := intParam(q.Get("limit"), "limit", defaultDLQList, 1, 100_000)
	if err != nil {
		return err
	}
	f, err := filterOf(q.Get("tenant"), q.Get("reason"), q.Get("since"), limit)
	if err != nil {
		return err
	}
	if s.cfg.DeadLetters == nil {
		return fmt.Errorf("dead letters: %w", errUnavailable)
	}
	res, err := s.cfg.DeadLetters.List(r.Context(), f)
	if err != nil {
		return fmt.Errorf("listing dead letters: %w", err)
	}
	return writeJSON(w, http.StatusOK, res)
}

// showDeadLetter answers GET /dlq/{id}.
func (s *Server) showDeadLetter(w http.ResponseWriter, r *http.Request) error {
	id, err := strconv.ParseUint(r.PathValue("id"), 10, 64)
	if err != nil || id == 0 {
		return fmt.Errorf("%w: dead letter id %q: want its sequence, a whole number from 1", ErrBadInput, r.PathValue("id"))
	}
	if s.cfg.DeadLetters == nil {
		return fmt.Errorf("dead letters: %w", errUnavailable)
	}
	res, err := s.cfg.DeadLetters.Show(r.Context(), id)
	if err != nil {
		return fmt.Errorf("dead letter %d: %w", id, err)
	}
	return writeJSON(w, http.StatusOK, res)
}

// selectionBody is the body of POST /dlq/replay and /dlq/purge.
type selectionBody struct {
	IDs    []uint64 `json:"ids"`
	Tenant string   `json:"tenant"`
	Reason string   `json:"reason"`
	Since  string   `json:"since"`
	// All must be true to select every dead letter: an empty body
	// selects none rather than all.
	All    bool `json:"all"`
	DryRun bool `json:"dry_run"`
}

// selection reads a selection body.
func selection(r *http.Request) (DeadLetterSelection, error) {
	var b selectionBody
	if err := readJSON(r, &b); err != nil {
		return DeadLetterSelection{}, err
	}
	f, err := filterOf(b.Tenant, b.Reason, b.Since, 0)
	if err != nil {
		return DeadLetterSelection{}, err
	}
	if len(b.IDs) == 0 && f == (DeadLetterFilter{}) && !b.All {
		return DeadLetterSelection{}, fmt.Errorf(`%w: select dead letters by "ids", "tenant", "reason" or "since", or every one with "all": true`, ErrBadInput)
	}
	return DeadLetterSelection{DeadLetterFilter: f, IDs: b.IDs, DryRun: b.DryRun}, nil
}

// replayDeadLetters answers POST /dlq/replay.
func (s *Server) replayDeadLetters(w http.ResponseWriter, r *http.Request) error {
	sel, err := selection(r)
	if err != nil {
		return err
	}
	if s.cfg.DeadLetters == nil {
		return fmt.Errorf("dead letters: %w", errUnavailable)
	}
	res, err := s.cfg.DeadLetters.Replay(r.Context(), sel)
	if err != nil {
		return fmt.Errorf("replaying dead letters: %w", err)
	}
	if !sel.DryRun {
		s.log.Info("admin: dead letters replayed", "ids", sel.IDs, "tenant", sel.Tenant, "reason", sel.Reason, "since", sel.Since, "result", logJSON(res), "remote", r.RemoteAddr)
	}
	return writeJSON(w, http.StatusOK, res)
}

// purgeDeadLetters answers POST /dlq/purge.
func (s *Server) purgeDeadLetters(w http.ResponseWriter, r *http.Request) error {
	sel, err := selection(r)
	if err != nil {
		return err
	}
	if s.cfg.DeadLetters == nil {
		return fmt.Errorf("dead letters: %w", errUnavailable)
	}
	res, err := s.cfg.DeadLetters.Purge(r.Context(), sel)
	if err != nil {
		return fmt.Errorf("purging dead letters: %w", err)
	}
	if !sel.DryRun {
		s.log.Info("admin: dead letters purged", "ids", sel.IDs, "tenant", sel.Tenant, "reason", sel.Reason, "since", sel.Since, "result", logJSON(res), "remote", r.RemoteAddr)
	}
	return writeJSON(w, http.StatusOK, res)
}

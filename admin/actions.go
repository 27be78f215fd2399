package admin

import (
	"fmt"
	"net/http"
	"time"

	"github.com/throttler/throttler/internal/ops"
	"github.com/throttler/throttler/limits"
)

// limitsParam reads the {tenant} of a limits route: a tenant, or
// limits.DefaultKey for every tenant without limits of its own.
func limitsParam(r *http.Request) (string, error) {
	t := r.PathValue("tenant")
	if err := limits.CheckKey(t); err != nil {
		return "", fmt.Errorf("%w: %v", ErrBadInput, err)
	}
	return t, nil
}

// getLimits answers GET /tenants/{tenant}/limits.
func (s *Server) getLimits(w http.ResponseWriter, r *http.Request) error {
	t, err := limitsParam(r)
	if err != nil {
		return err
	}
	if s.cfg.Limits == nil {
		return fmt.Errorf("limits: %w", errUnavailable)
	}
	v, err := s.cfg.Limits.Get(r.Context(), t)
	if err != nil {
		return fmt.Errorf("reading %s's limits: %w", t, err)
	}
	return writeJSON(w, http.StatusOK, v)
}

// putLimits answers PUT /tenants/{tenant}/limits {"spec": "50/s:100"}.
func (s *Server) putLimits(w http.ResponseWriter, r *http.Request) error {
	t, err := limitsParam(r)
	if err != nil {
		return err
	}
	var body struct {
		Spec *string `json:"spec"`
	}
	if err := readJSON(r, &body); err != nil {
		return err
	}
	if body.Spec == nil {
		return fmt.Errorf(`%w: the body must be {"spec": "..."}, such as {"spec": "50/s:100"}`, ErrBadInput)
	}
	if s.cfg.Limits == nil {
		return fmt.Errorf("limits: %w", errUnavailable)
	}
	ch, err := s.cfg.Limits.Set(r.Context(), t, *body.Spec)
	if err != nil {
		return err
	}
	s.log.Info("admin: limits changed", "tenant", t, "before", ch.Before, "after", ch.After, "revision", ch.Revision, "remote", r.RemoteAddr)
	return writeJSON(w, http.StatusOK, ch)
}

// deleteLimits answers DELETE /tenants/{tenant}/limits: the tenant's value
// removed from the limits bucket, the environment's limits applying again.
func (s *Server) deleteLimits(w http.ResponseWriter, r *http.Request) error {
	t, err := limitsParam(r)
	if err != nil {
		return err
	}
	if s.cfg.Limits == nil {
		return fmt.Errorf("limits: %w", errUnavailable)
	}
	ch, err := s.cfg.Limits.Remove(r.Context(), t)
	if err != nil {
		return err
	}
	if ch.Removed != nil && *ch.Removed {
		s.log.Info("admin: limits removed", "tenant", t, "before", ch.Before, "after", ch.After, "revision", ch.Revision, "remote", r.RemoteAddr)
	}
	return writeJSON(w, http.StatusOK, ch)
}

// duration reads an optional duration of a body, as the CLI's flags
// take it (ops.ParseDuration); "" is 0.
func duration(s, name string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := ops.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%w: %s %w", ErrBadInput, name, err)
	}
	return d, nil
}

// pause answers POST /tenants/{tenant}/pause {"reason": "...", "for": "1h"}
// or {"reason": "...", "until": "2026-12-06T09:00:00Z"}.
func (s *Server) pause(w http.ResponseWriter, r *http.Request) error {
	t, err := tenantParam(r)
	if err != nil {
		return err
	}
	var body struct {
		Reason string `json:"reason"`
		For    string `json:"for"`
		Until  string `json:"until"`
	}
	if err := readJSON(r, &body); err != nil {
		return err
	}
	d, err := duration(body.For, "for")
	if err != nil {
		return err
	}
	var until time.Time
	if body.Until != "" {
		if until, err = time.Parse(time.RFC3339, body.Until); err != nil {
			return fmt.Errorf("%w: until %q: want an RFC 3339 time such as 2026-01-02T15:04:05Z", ErrBadInput, body.Until)
		}
	}
	if s.cfg.Pauser == nil {
		return fmt.Errorf("pause: %w", errUnavailable)
	}
	res, err := s.cfg.Pauser.Pause(r.Context(), PauseRequest{Tenant: t, Reason: body.Reason, For: d, Until: until})
	if err != nil {
		return fmt.Errorf("pausing %s: %w", t, err)
	}
	s.log.Info("admin: tenant paused", "tenant", t, "reason", body.Reason, "for", d, "until", body.Until, "remote", r.RemoteAddr)
	return writeJSON(w, http.StatusOK, res)
}

// resume answers POST /tenants/{tenant}/resume.
func (s *Server) resume(w http.ResponseWriter, r *http.Request) error {
	t, err := tenantParam(r)
	if err != nil {
		return err
	}
	if s.cfg.Pauser == nil {
		return fmt.Errorf("resume: %w", errUnavailable)
	}
	res, err := s.cfg.Pauser.Resume(r.Context(), t)
	if err != nil {
		return fmt.Errorf("resuming %s: %w", t, err)
	}
	s.log.Info("admin: tenant resumed", "tenant", t, "result", logJSON(res), "remote", r.RemoteAddr)
	return writeJSON(w, http.StatusOK, res)
}

// purge answers POST /tenants/{tenant}/purge {"older_than": "10m",
// "dry_run": true}.
func (s *Server) purge(w http.ResponseWriter, r *http.Request) error {
	t, err := tenantParam(r)
	if err != nil {
		return err
	}
	var body struct {
		OlderThan string `json:"older_than"`
		DryRun    bool   `json:"dry_run"`
	}
	if err := readJSON(r, &body); err != nil {
		return err
	}
	d, err := duration(body.OlderThan, "older_than")
	if err != nil {
		return err
	}
	if s.cfg.Purger == nil {
		return fmt.Errorf("purge: %w", errUnavailable)
	}
	res, err := s.cfg.Purger.Purge(r.Context(), PurgeRequest{Tenant: t, OlderThan: d, DryRun: body.DryRun})
	if err != nil {
		return fmt.Errorf("purging %s: %w", t, err)
	}
	if !body.DryRun {
		s.log.Info("admin: tenant purged", "tenant", t, "older_than", d, "result", logJSON(res), "remote", r.RemoteAddr)
	}
	return writeJSON(w, http.StatusOK, res)
}

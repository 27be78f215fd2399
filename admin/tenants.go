package admin

import (
	"cmp"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/throttler/throttler/tenant"
)

// tenantsPage is the answer of GET /tenants: one page of the fleet view,
// filtered and sorted.
type tenantsPage struct {
	At      time.Time `json:"at"`
	Workers int       `json:"workers"`
	// Tenants counts every tenant in the view, Matched those the filter
	// keeps; Rows are Matched's page from Offset.
	Tenants int         `json:"tenants"`
	Matched int         `json:"matched"`
	Offset  int         `json:"offset"`
	Limit   int         `json:"limit"`
	Rows    []TenantRow `json:"rows"`
	// Totals add up every tenant's row.
	Totals totals `json:"totals"`
}

// totals are the fleet's sums over every tenant.
type totals struct {
	Admitted    float64 `json:"admitted_per_s"`
	Deferred    float64 `json:"deferred_per_s"`
	Waiting     int64   `json:"waiting"`
	DeadLetters int64   `json:"dead_letters_1h"`
}

// Page sizes of GET /tenants.
const (
	defaultPage = 50
	maxPage     = 1000
)

// sorts are the columns GET /tenants sorts by, each ascending.
var sorts = map[string]func(a, b TenantRow) int{
	"tenant":       func(a, b TenantRow) int { return strings.Compare(a.Tenant, b.Tenant) },
	"admitted":     func(a, b TenantRow) int { return cmp.Compare(a.Admitted, b.Admitted) },
	"deferred":     func(a, b TenantRow) int { return cmp.Compare(a.Deferred, b.Deferred) },
	"waiting":      func(a, b TenantRow) int { return cmp.Compare(a.Waiting(), b.Waiting()) },
	"nakd":         func(a, b TenantRow) int { return cmp.Compare(a.Naked, b.Naked) },
	"moved":        func(a, b TenantRow) int { return cmp.Compare(a.Moved, b.Moved) },
	"parked":       func(a, b TenantRow) int { return cmp.Compare(a.Parked, b.Parked) },
	"paused":       func(a, b TenantRow) int { return cmp.Compare(a.Paused, b.Paused) },
	"oldest_wait":  func(a, b TenantRow) int { return cmp.Compare(a.OldestWait, b.OldestWait) },
	"held_by":      func(a, b TenantRow) int { return strings.Compare(a.Binding, b.Binding) },
	"dead_letters": func(a, b TenantRow) int { return cmp.Compare(a.DeadLetters, b.DeadLetters) },
}

// listTenants answers GET /tenants?q=&name=&sort=&order=&offset=&limit=.
func (s *Server) listTenants(w http.ResponseWriter, r *http.Request) error {
	if s.top == nil {
		return fmt.Errorf("the fleet view (throttler top): %w", errUnavailable)
	}
	q := r.URL.Query()
	by := cmp.Or(q.Get("sort"), "waiting")
	less, ok := sorts[by]
	if !ok {
		return fmt.Errorf("%w: sort %q: want one of tenant, admitted, deferred, waiting, nakd, moved, parked, paused, oldest_wait, held_by, dead_letters", ErrBadInput, by)
	}
	order := cmp.Or(q.Get("order"), "desc")
	if order != "asc" && order != "desc" {
		return fmt.Errorf("%w: order %q: want asc or desc", ErrBadInput, order)
	}
	offset, err := intParam(q.Get("offset"), "offset", 0, 0, math.MaxInt32)
	if err != nil {
		return err
	}
	limit, err := intParam(q.Get("limit"), "limit", defaultPage, 1, maxPage)
	if err != nil {
		return err
	}
	v, err := s.top.get(r.Context())
	if err != nil {
		return err
	}
	page := tenantsPage{At: v.At, Workers: v.Workers, Tenants: len(v.Rows), Offset: offset, Limit: limit, Rows: []TenantRow{}}
	needle, name := strings.ToLower(q.Get("q")), q.Get("name")
	matched := make([]TenantRow, 0, len(v.Rows))
	for _, row := range v.Rows {
		page.Totals.Admitted += row.Admitted
		page.Totals.Deferred += row.Deferred
		page.Totals.Waiting += row.Waiting()
		page.Totals.DeadLetters += row.DeadLetters
		if (name == "" || row.Tenant == name) && (needle == "" || strings.Contains(strings.ToLower(row.Tenant), needle)) {
			matched = append(matched, row)
		}
	}
	slices.SortFunc(matched, func(a, b TenantRow) int {
		c := less(a, b)
		if order == "desc" {
			c = -c
		}
		return cmp.Or(c, strings.Compare(a.Tenant, b.Tenant))
	})
	page.Matched = len(matched)
	if offset < len(matched) {
		page.Rows = matched[offset:min(len(matched), offset+limit)]
	}
	return writeJSON(w, http.StatusOK, page)
}

// intParam reads a whole-number query parameter within [lo, hi], def when
// absent.
func intParam(s, name string, def, lo, hi int) (int, error) {
	if s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < lo || n > hi {
		return 0, fmt.Errorf("%w: %s %q: want a whole number from %d to %d", ErrBadInput, name, s, lo, hi)
	}
	return n, nil
}

// tenantParam reads and checks the {tenant} of the path.
func tenantParam(r *http.Request) (string, error) {
	t := r.PathValue("tenant")
	if err := tenant.Validate(t); err != nil {
		return "", fmt.Errorf("%w: %v", ErrBadInput, err)
	}
	return t, nil
}

// inspectTenant answers GET /tenants/{tenant}: throttler inspect's report.
func (s *Server) inspectTenant(w http.ResponseWriter, r *http.Request) error {
	t, err := tenantParam(r)
	if err != nil {
		return err
	}
	if s.cfg.Inspector == nil {
		return fmt.Errorf("inspect: %w", errUnavailable)
	}
	rep, err := s.cfg.Inspector.Inspect(r.Context(), t)
	if err != nil {
		return fmt.Errorf("inspecting %s: %w", t, err)
	}
	return writeJSON(w, http.StatusOK, rep)
}

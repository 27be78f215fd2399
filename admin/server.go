// Package admin serves the admin HTTP API (/api/v1, documented in
// openapi.json) and the web console (/) on THROTTLER_ADMIN_ADDR. Every
// request to the API needs Authorization: Bearer THROTTLER_ADMIN_TOKEN;
// without a token the server binds only loopback addresses. Any worker
// answers for the whole fleet: the data comes from NATS and Redis, shared
// by every worker, and from the workers' answers over NATS (top, roll
// call), never from this worker's memory alone.
//
// The operations are reached through small ports (ports.go) that
// internal/app fills with the real ones.
package admin

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"
)

// Config is what a Server needs. The ports may be nil: their routes then
// answer 501.
type Config struct {
	// Token is THROTTLER_ADMIN_TOKEN; "" lets every request in, which
	// Listen allows only on loopback addresses.
	Token string
	// Version is the worker's build, shown by the console.
	Version string

	Tenants     Tenants
	Inspector   Inspector
	Limits      Limits
	Pauser      Pauser
	Purger      Purger
	DeadLetters DeadLetters
	Workers     Workers

	// Logger receives a line for every request that changes something,
	// saying what changed. Defaults to slog.Default().
	Logger *slog.Logger
	// TopEvery is how long a fleet view is served before it is gathered
	// again (one gathering serves every viewer). Defaults to 1s.
	TopEvery time.Duration
	// Now is the clock of the fleet view's cache. Defaults to time.Now.
	Now func() time.Time
}

// Server is the admin API and console as an http.Handler. Safe for
// concurrent use.
type Server struct {
	cfg Config
	log *slog.Logger
	top *topCache
	mux *http.ServeMux
}

// New returns a Server for cfg.
func New(cfg Config) *Server {
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	cfg.TopEvery = cmp.Or(cfg.TopEvery, time.Second)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &Server{cfg: cfg, log: cfg.Logger, mux: http.NewServeMux()}
	if cfg.Tenants != nil {
		s.top = newTopCache(cfg.Tenants, cfg.TopEvery, cfg.Now)
	}
	s.routes()
	return s
}

// ServeHTTP serves the API and the console.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Referrer-Policy", "no-referrer")
	s.mux.ServeHTTP(w, r)
}

// route is one API route: its method and pattern under /api/v1, and its
// handler. The OpenAPI test checks the document against this list.
type route struct {
	method, path string
	handle       func(http.ResponseWriter, *http.Request) error
}

// apiPrefix is where the API lives.
const apiPrefix = "/api/v1"

// apiRoutes lists every API route.
func (s *Server) apiRoutes() []route {
	return []route{
		{"GET", "/tenants", s.listTenants},
		{"GET", "/tenants/{tenant}", s.inspectTenant},
		{"GET", "/tenants/{tenant}/limits", s.getLimits},
		{"PUT", "/tenants/{tenant}/limits", s.putLimits},
		{"DELETE", "/tenants/{tenant}/limits", s.deleteLimits},
		{"POST", "/tenants/{tenant}/pause", s.pause},
		{"POST", "/tenants/{tenant}/resume", s.resume},
		{"POST", "/tenants/{tenant}/purge", s.purge},
		{"GET", "/levels", s.listLevels},
		{"GET", "/levels/{level}", s.inspectLevel},
		{"GET", "/dlq", s.listDeadLetters},
		{"GET", "/dlq/{id}", s.showDeadLetter},
		{"POST", "/dlq/replay", s.replayDeadLetters},
		{"POST", "/dlq/purge", s.purgeDeadLetters},
		{"GET", "/fleet", s.fleet},
		{"GET", "/openapi.json", s.openAPI},
	}
}

// Routes lists the API's routes, "METHOD /api/v1/PATH" each, in the
// patterns of net/http ({tenant}, {level}, {id}).
func (s *Server) Routes() []string {
	var out []string
	for _, rt := range s.apiRoutes() {
		out = append(out, rt.method+" "+apiPrefix+rt.path)
	}
	return out
}

// routes registers the API behind the token, and the console.
func (s *Server) routes() {
	for _, rt := range s.apiRoutes() {
		s.mux.Handle(rt.method+" "+apiPrefix+rt.path, s.authed(apiHandler(rt.handle)))
	}
	unrouted := s.unrouted()
	s.mux.Handle(apiPrefix+"/", s.authed(unrouted))
	s.consoleRoutes()
	// Outside the API too, a path no route has gets JSON, not net/http's
	// plain text; it tells nothing about the data, so it needs no token.
	s.mux.Handle("/", unrouted)
}

// The console's routes (consoleRoutes): its page and its assets.
const (
	consolePage   = "GET /{$}"
	consoleAssets = "GET /assets/"
)

// consolePatterns are the console's routes, which a request that no route
// took is matched against as the API's are.
var consolePatterns = []string{consolePage, consoleAssets}

// unrouted answers, as JSON, a request that no route took: 405 with the
// methods its path takes (Allow), as net/http would, or 404 when no route
// has the path. The catch-alls that keep the errors JSON match every
// method, so net/http's own 405 never comes.
func (s *Server) unrouted() http.Handler {
	paths := http.NewServeMux() // matched against, never served
	patterns := slices.Clone(consolePatterns)
	for _, rt := range s.apiRoutes() {
		patterns = append(patterns, rt.method+" "+apiPrefix+rt.path)
	}
	var methods []string
	for _, p := range patterns {
		paths.Handle(p, http.NotFoundHandler())
		if m, _, _ := strings.Cut(p, " "); !slices.Contains(methods, m) {
			methods = append(methods, m)
		}
	}
	slices.Sort(methods)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var allow []string
		for _, m := range methods {
			probe := *r
			probe.Method = m
			if _, pattern := paths.Handler(&probe); pattern != "" {
				allow = append(allow, m)
			}
		}
		if len(allow) == 0 {
			writeError(w, http.StatusNotFound, "no such route: "+r.Method+" "+r.URL.Path)
			return
		}
		w.Header().Set("Allow", strings.Join(allow, ", "))
		writeError(w, http.StatusMethodNotAllowed, fmt.Sprintf("%s takes %s, not %s", r.URL.Path, strings.Join(allow, " or "), r.Method))
	})
}

// apiHandler turns a handler returning an error into an http.Handler that
// answers the error as JSON with its status.
func apiHandler(h func(http.ResponseWriter, *http.Request) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		if err := h(w, r); err != nil {
			writeError(w, statusOf(err), err.Error())
		}
	})
}

// errUnavailable says a port is not wired in this build.
var errUnavailable = errors.New("not available in this build")

// statusOf maps an error of a port to an HTTP status.
func statusOf(err error) int {
	switch {
	case errors.Is(err, ErrBadInput):
		return http.StatusBadRequest
	case errors.Is(err, ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, errUnavailable):
		return http.StatusNotImplemented
	case errors.Is(err, errTooLarge):
		return http.StatusRequestEntityTooLarge
	}
	return http.StatusBadGateway
}

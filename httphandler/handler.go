// Package httphandler is the handler behind THROTTLER_HANDLER=http: it
// sends each admitted job to an HTTP endpoint and turns the answer into
// the worker's outcomes (done, failed, failed for good, or asked to wait).
// It is split by job: this file builds the client and the request,
// outcome.go reads the response, retryafter.go reads Retry-After, cost.go
// reads the cost a job reports (Throttler-Cost).
package httphandler

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/throttler/throttler/config"
	"github.com/throttler/throttler/consumer"
	"github.com/throttler/throttler/header"
)

// Request headers the handler sets on every request.
const (
	// HeaderIdempotencyKey carries the job's id, "STREAM:SEQ" of its first
	// delivery, the same for every attempt, so the endpoint can drop a job
	// it already took (a retry after a lost answer).
	HeaderIdempotencyKey = "Idempotency-Key"
)

// DefaultHold is how long a 429 without a readable Retry-After holds the
// tenant.
const DefaultHold = time.Second

// Options configures a Handler.
type Options struct {
	// URL is the endpoint's URL template: {tenant} and {subject} are
	// replaced by the job's, path-escaped (config.RenderHTTPURL).
	// Required.
	URL string
	// Method is the request method. Defaults to POST.
	Method string
	// Timeout bounds each request, from connecting to reading the answer.
	// Defaults to 30s.
	Timeout time.Duration
	// Headers are static headers set on every request, over the job's own.
	Headers http.Header
	// Conns is how many connections to keep open per host: the worker's
	// concurrency, so that every handler can reuse one. Defaults to 16.
	Conns int
	// Now is the clock Retry-After is read against. Defaults to time.Now.
	Now func() time.Time
	// Logger logs a malformed HeaderCost, once per tenant. Defaults to
	// slog.Default().
	Logger *slog.Logger
}

// Handler sends jobs to an HTTP endpoint through one client that keeps
// its connections alive. It is safe for concurrent use.
type Handler struct {
	opts    Options
	client  *http.Client
	badCost sync.Map // tenant → true once a malformed HeaderCost of its was logged
}

// New returns a Handler for opts.
func New(opts Options) (*Handler, error) {
	if opts.URL == "" {
		return nil, errors.New("httphandler: no URL")
	}
	if opts.Method == "" {
		opts.Method = http.MethodPost
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 30 * time.Second
	}
	if opts.Conns <= 0 {
		opts.Conns = 16
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	dialer := &net.Dialer{Timeout: min(opts.Timeout, 10*time.Second), KeepAlive: 30 * time.Second}
	transport := &http.Transport{
		Proxy:             http.ProxyFromEnvironment,
		DialContext:       dialer.DialContext,
		ForceAttemptHTTP2: true,
		// The default keeps 2 idle connections per host: with more
		// handlers than that, every request past the second would open a
		// connection of its own.
		MaxIdleConns:          opts.Conns * 2,
		MaxIdleConnsPerHost:   opts.Conns,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   min(opts.Timeout, 10*time.Second),
		ExpectContinueTimeout: time.Second,
		// A nil RootCAs means the system's roots.
		TLSClientConfig: &tls.Config{MinVersion: tls.VersionTLS12},
	}
	client := &http.Client{
		Transport: transport,
		// A job goes where it is configured to go: a redirect is an answer
		// (a failure), not a place to send the job and its credentials.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return &Handler{opts: opts, client: client}, nil
}

// Close closes the client's idle connections.
func (h *Handler) Close() { h.client.CloseIdleConnections() }

// Handle sends job, as a consumer.Handler: nil on a 2xx answer (whose
// HeaderCost, if any, reports the job's actual cost); a
// consumer.Permanent error on another 4xx than 429 (with the status and
// the start of the answer's body); a *consumer.RetryAfter on 429, or 503
// with Retry-After; any other error (5xx, 3xx, no connection, timeout) is
// an ordinary failure, retried.
func (h *Handler) Handle(ctx context.Context, job consumer.Job) error {
	ctx, cancel := context.WithTimeout(ctx, h.opts.Timeout)
	defer cancel()
	target := config.RenderHTTPURL(h.opts.URL, job.Tenant, job.Subject)
	shown := config.MaskURL(target)
	req, err := http.NewRequestWithContext(ctx, h.opts.Method, target, bytes.NewReader(job.Data))
	if err != nil {
		return consumer.Permanent(fmt.Errorf("%s %s: %w", h.opts.Method, shown, err))
	}
	setHeaders(req.Header, job, h.opts.Headers)
	resp, err := h.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // its message repeats the URL, secrets and all
		}
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
			err = fmt.Errorf("no answer within %s: %w", h.opts.Timeout, err)
		}
		return fmt.Errorf("%s %s: %w", h.opts.Method, shown, err)
	}
	if err := h.outcome(resp, h.opts.Method+" "+shown); err != nil {
		return err
	}
	h.reportCost(ctx, job, resp.Header.Values(HeaderCost))
	return nil
}

// hopByHop are headers that belong to one connection, not to the job.
var hopByHop = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Authenticate": true, "Proxy-Authorization": true,
	"Proxy-Connection": true, "Te": true, "Trailer": true, "Transfer-Encoding": true, "Upgrade": true,
	"Host": true, "Content-Length": true,
}

// setHeaders sets the request's headers: the job's own but those NATS
// acts on (Nats-*) and the hop-by-hop ones, then the static ones over
// them, then the job's identity, which nothing overrides.
func setHeaders(dst http.Header, job consumer.Job, static http.Header) {
	for k, vs := range job.Header {
		ck := http.CanonicalHeaderKey(k)
		if strings.HasPrefix(ck, "Nats-") || hopByHop[ck] {
			continue
		}
		for _, v := range vs {
			dst.Add(ck, v)
		}
	}
	for k, vs := range static {
		dst[http.CanonicalHeaderKey(k)] = append([]string(nil), vs...)
	}
	dst.Set(header.Tenant, job.Tenant)
	dst.Set(header.JobID, job.ID)
	dst.Set(HeaderIdempotencyKey, job.ID)
}

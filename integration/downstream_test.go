package integration

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// downstream is the HTTP endpoint behind THROTTLER_HANDLER=http in the
// fleet tests. It answers each request as the test scripts it (200 after
// 200 ms unless told otherwise) and records what a concurrency cap or a
// hold is judged by: per tenant, every change of the number of its
// requests in flight with its time, and a ledger of every request.
//
// Every time is this process's clock, read under one lock, so a series is
// in time order and comparable across tenants and with the ledger. A
// request's end is recorded before its answer leaves, so a worker let
// through by another request's end starts its own only after that end is
// recorded: the recording never shows a cap exceeded by its own timing.
// A request keeps working for its whole duration even when the client
// has gone (a worker killed), as a real endpoint would: a job orphaned by
// a dead worker still loads the endpoint.
type downstream struct {
	opts    downstreamOptions
	srv     *httptest.Server
	closing chan struct{} // closed when the test ends: every request answers at once

	mu       sync.Mutex
	ledger   []call
	attempts map[string]int    // requests so far per Idempotency-Key
	answered map[string]bool   // keys answered 2xx
	inFlight map[string]int    // per tenant, and allTenants
	series   map[string][]step // per tenant, and allTenants
}

// allTenants is the series key of all tenants together; no tenant has a
// "*" in its name.
const allTenants = "*"

// workerHeader names the worker a request came from: each worker process
// of a fleet test sends it as a static header (THROTTLER_HTTP_HEADERS).
const workerHeader = "Throttler-Test-Worker"

// defaultTook is how long a request takes when the test does not say.
const defaultTook = 200 * time.Millisecond

// downstreamOptions scripts a downstream.
type downstreamOptions struct {
	// Took is how long a 200 takes, by tenant; a tenant not listed takes
	// defaultTook.
	Took map[string]time.Duration
	// Answer, when set, scripts a request's answer; ok false leaves the
	// request to the default (200 after Took). It runs outside the
	// downstream's lock, concurrently with other requests.
	Answer func(c call) (r reply, ok bool)
}

// call is one request in the ledger.
type call struct {
	Key     string // Idempotency-Key
	Tenant  string // Throttler-Tenant
	Worker  string // workerHeader
	Attempt int    // 1 for the first request with this Key
	Arrived time.Time
	Ended   time.Time // zero while in flight
	Status  int       // the answer's status; 0: none (in flight, or the client gave up)
}

// reply is a scripted answer.
type reply struct {
	Status     int           // 0 means 200
	RetryAfter string        // the Retry-After header, if not empty
	Body       string        // the answer's body
	Took       time.Duration // how long the server works before answering
	Hang       bool          // never answer: wait until the client gives up
}

// step is one change of a tenant's requests in flight: n from at on.
type step struct {
	at time.Time
	n  int
}

// startDownstream starts a downstream on a free port; it is closed when the
// test ends, after everything cleaned up later (the workers) has stopped.
func startDownstream(t testing.TB, opts downstreamOptions) *downstream {
	t.Helper()
	d := &downstream{opts: opts, closing: make(chan struct{}),
		attempts: map[string]int{}, answered: map[string]bool{}, inFlight: map[string]int{}, series: map[string][]step{}}
	d.srv = httptest.NewServer(d)
	t.Cleanup(func() {
		close(d.closing)
		d.srv.Close()
	})
	return d
}

// URL is the downstream's base URL.
func (d *downstream) URL() string { return d.srv.URL }

// ServeHTTP records the request, answers it as scripted and records its end.
func (d *downstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	c := call{Key: r.Header.Get("Idempotency-Key"), Tenant: r.Header.Get("Throttler-Tenant"), Worker: r.Header.Get(workerHeader)}
	d.mu.Lock()
	d.attempts[c.Key]++
	c.Attempt = d.attempts[c.Key]
	c.Arrived = time.Now()
	i := len(d.ledger)
	d.ledger = append(d.ledger, c)
	d.changeLocked(c.Tenant, +1, c.Arrived)
	d.mu.Unlock()

	rep, ok := reply{}, false
	if d.opts.Answer != nil {
		rep, ok = d.opts.Answer(c)
	}
	if !ok {
		rep = reply{Took: d.took(c.Tenant)}
	}
	status := max(rep.Status, 0)
	if status == 0 {
		status = http.StatusOK
	}
	switch {
	case rep.Hang:
		select {
		case <-r.Context().Done():
		case <-d.closing:
		}
		status = 0
	case rep.Took > 0:
		timer := time.NewTimer(rep.Took)
		select {
		case <-timer.C:
		case <-d.closing:
			timer.Stop()
		}
	}

	d.mu.Lock()
	end := time.Now()
	d.ledger[i].Ended, d.ledger[i].Status = end, status
	if status >= 200 && status <= 299 {
		d.answered[c.Key] = true
	}
	d.changeLocked(c.Tenant, -1, end)
	d.mu.Unlock()
	if status == 0 {
		return // nobody is listening
	}
	if rep.RetryAfter != "" {
		w.Header().Set("Retry-After", rep.RetryAfter)
	}
	w.WriteHeader(status)
	_, _ = io.WriteString(w, rep.Body)
}

// took is how long tenant's requests take by default.
func (d *downstream) took(tenant string) time.Duration {
	if v, ok := d.opts.Took[tenant]; ok {
		return v
	}
	return defaultTook
}

// changeLocked records tenant's in-flight count moving by delta at at.
func (d *downstream) changeLocked(tenant string, delta int, at time.Time) {
	for _, k := range []string{tenant, allTenants} {
		d.inFlight[k] += delta
		d.series[k] = append(d.series[k], step{at: at, n: d.inFlight[k]})
	}
}

// calls returns the ledger so far, in order of arrival.
func (d *downstream) calls() []call {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]call(nil), d.ledger...)
}

// steps returns tenant's in-flight series so far (allTenants: the sum).
func (d *downstream) steps(tenant string) []step {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]step(nil), d.series[tenant]...)
}

// maxInFlight is the most requests of tenant (allTenants: of all) in flight
// at any moment so far.
func (d *downstream) maxInFlight(tenant string) int { return seriesMax(d.steps(tenant)) }

// shareExactly is the fraction of [from, to) during which tenant had exactly
// k requests in flight.
func (d *downstream) shareExactly(tenant string, k int, from, to time.Time) float64 {
	return seriesShare(d.steps(tenant), from, to, func(n int) bool { return n == k })
}

// shareAtLeast is the fraction of [from, to) during which tenant had at
// least k requests in flight.
func (d *downstream) shareAtLeast(tenant string, k int, from, to time.Time) float64 {
	return seriesShare(d.steps(tenant), from, to, func(n int) bool { return n >= k })
}

// firstAtLeast is the first moment at or after from when tenant had at least
// k requests in flight.
func (d *downstream) firstAtLeast(tenant string, k int, from time.Time) (time.Time, bool) {
	return seriesFirst(d.steps(tenant), from, func(n int) bool { return n >= k })
}

// requestsIn counts tenant's requests (allTenants: all) that arrived in
// [from, to).
func (d *downstream) requestsIn(tenant string, from, to time.Time) int {
	n := 0
	for _, c := range d.calls() {
		if (tenant == allTenants || c.Tenant == tenant) && !c.Arrived.Before(from) && c.Arrived.Before(to) {
			n++
		}
	}
	return n
}

// duplicates returns every Idempotency-Key sent more than once, with how
// many times it was sent.
func (d *downstream) duplicates() map[string]int { return duplicateKeys(d.calls()) }

// missingOK counts the keys of keys that have not had a 2xx answer. It
// copies nothing: tests poll it while thousands of requests run.
func (d *downstream) missingOK(keys []string) (missing int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, k := range keys {
		if !d.answered[k] {
			missing++
		}
	}
	return missing
}

// inFlightBy counts tenant's requests from each worker in flight now.
func (d *downstream) inFlightBy(tenant string) map[string]int {
	out := map[string]int{}
	for _, c := range d.calls() {
		if c.Tenant == tenant && c.Ended.IsZero() {
			out[c.Worker]++
		}
	}
	return out
}

// seriesMax is the largest count of s.
func seriesMax(s []step) int {
	most := 0
	for _, st := range s {
		most = max(most, st.n)
	}
	return most
}

// seriesShare is the fraction of [from, to) during which the count of s
// (0 before its first step) satisfies ok.
func seriesShare(s []step, from, to time.Time, ok func(n int) bool) float64 {
	if !to.After(from) {
		return 0
	}
	var in time.Duration
	n, prev := 0, from
	for _, st := range s {
		if !st.at.After(from) {
			n = st.n
			continue
		}
		if !st.at.Before(to) {
			break
		}
		if ok(n) {
			in += st.at.Sub(prev)
		}
		n, prev = st.n, st.at
	}
	if ok(n) {
		in += to.Sub(prev)
	}
	return float64(in) / float64(to.Sub(from))
}

// seriesFirst is the first moment at or after from when the count of s
// satisfies ok.
func seriesFirst(s []step, from time.Time, ok func(n int) bool) (time.Time, bool) {
	n := 0 // the count at from
	for _, st := range s {
		if st.at.After(from) {
			break
		}
		n = st.n
	}
	if ok(n) {
		return from, true
	}
	for _, st := range s {
		if st.at.After(from) && ok(st.n) {
			return st.at, true
		}
	}
	return time.Time{}, false
}

// duplicateKeys returns every key of calls sent more than once, with its
// count.
func duplicateKeys(calls []call) map[string]int {
	n := map[string]int{}
	for _, c := range calls {
		n[c.Key]++
	}
	out := map[string]int{}
	for k, v := range n {
		if v > 1 {
			out[k] = v
		}
	}
	return out
}

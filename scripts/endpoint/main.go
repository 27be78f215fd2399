// Command endpoint is a stand-in for the service the worker's http handler
// calls, for trying THROTTLER_HANDLER=http on one machine:
//
//	go run ./scripts/endpoint [-addr 127.0.0.1:8080] [-delay 2s]
//
// It answers every request after -delay, 200, or 422 when the body holds
// "fail" (the worker dead-letters a job answered 4xx at once), and prints a
// line per request with the tenant and how many of its requests it serves
// at that moment: under a running cap, never more than the cap.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "host:port to listen on")
	delay := flag.Duration("delay", 2*time.Second, "how long each request takes")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	srv := &http.Server{Addr: *addr, Handler: newEndpoint(*delay, os.Stdout), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Shutdown(context.Background())
	}()
	fmt.Printf("endpoint on http://%s/, answering after %s; Ctrl-C ends\n", *addr, *delay)
	if err := srv.ListenAndServe(); err != nil && err != http.ErrServerClosed {
		fmt.Fprintln(os.Stderr, "endpoint:", err)
		os.Exit(1)
	}
}

// endpoint answers requests and counts those in flight per tenant.
type endpoint struct {
	delay time.Duration
	out   io.Writer

	mu      sync.Mutex
	running map[string]int
}

// newEndpoint returns an endpoint answering after delay, printing to out.
func newEndpoint(delay time.Duration, out io.Writer) *endpoint {
	return &endpoint{delay: delay, out: out, running: map[string]int{}}
}

// ServeHTTP implements http.Handler.
func (e *endpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	tenant := r.Header.Get("Throttler-Tenant")
	e.mu.Lock()
	e.running[tenant]++
	n := e.running[tenant]
	fmt.Fprintf(e.out, "%s %s %s tenant=%s running=%d job=%s body=%q\n", time.Now().Format("15:04:05.000"), r.Method, r.URL.Path,
		tenant, n, r.Header.Get("Throttler-Job-Id"), body)
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		e.running[tenant]--
		e.mu.Unlock()
	}()
	select {
	case <-time.After(e.delay):
	case <-r.Context().Done():
		return
	}
	if strings.Contains(string(body), "fail") {
		http.Error(w, "refused by the endpoint: the body says fail", http.StatusUnprocessableEntity)
		return
	}
	w.WriteHeader(http.StatusOK)
}

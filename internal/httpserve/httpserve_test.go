package httpserve_test

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/throttler/throttler/internal/httpserve"
)

// listen serves h on a free loopback port with httpserve and returns the
// address and the stop.
func listen(t *testing.T, h http.Handler) (addr string, stop func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	stop = httpserve.Serve(&http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}, ln, "test", log)
	return ln.Addr().String(), stop
}

// closedBy reads from conn until the server closes it, or until deadline:
// it reports whether the server had closed it (EOF or a reset) by then.
func closedBy(t *testing.T, conn net.Conn, deadline time.Duration) bool {
	t.Helper()
	if err := conn.SetReadDeadline(time.Now().Add(deadline)); err != nil {
		t.Fatalf("read deadline: %v", err)
	}
	_, err := io.ReadAll(conn)
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

// A client that opened a connection and sent nothing (a probe's or a
// browser's spare connection) counts as busy to net/http for 5 s: the stop
// closes it rather than wait, so it is closed once the stop has returned,
// well before the server's own 5 s timeout would have.
func TestStopClosesAConnectionThatSentNothing(t *testing.T) {
	addr, stop := listen(t, http.NotFoundHandler())
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer conn.Close()
	// The server must have accepted the connection before the stop, or
	// the stop would just close the listener: one request on another
	// connection, served after this one was dialled, shows the accept
	// loop is past it.
	resp, err := http.Get("http://" + addr + "/")
	if err != nil {
		t.Fatalf("GET: %v", err)
	}
	resp.Body.Close()
	stop()
	if !closedBy(t, conn, 2*time.Second) {
		t.Errorf("the idle connection was still open 2 s after the stop returned")
	}
}

// A connection that sent nothing does not make the stop wait out its
// grace: with a grace of a minute, the stop still returns at once, where
// net/http alone would wait for the connection's first 5 s.
func TestStopDoesNotWaitForAConnectionThatSentNothing(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	srv := &http.Server{Handler: http.NotFoundHandler(), ReadHeaderTimeout: time.Minute}
	stop := httpserve.ServeWithGrace(srv, ln, "test", log, time.Minute)
	addr := ln.Addr().String()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer conn.Close()
	resp, err := http.Get("http://" + addr + "/") // the accept loop is past conn
	if err != nil {
		t.Fatalf("GET: %v", err)
	}
	resp.Body.Close()
	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(4 * time.Second):
		t.Fatal("the stop still waited 4 s for a connection that sent nothing")
	}
	if !closedBy(t, conn, 2*time.Second) {
		t.Errorf("the connection that sent nothing was still open after the stop")
	}
}

// A request still running at the end of the grace is cut: the stop does
// not wait for it.
func TestStopCutsARequestPastTheGrace(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	defer close(release)
	addr, stop := listen(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatalf("write request: %v", err)
	}
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the request never reached its handler")
	}
	stop()
	if !closedBy(t, conn, 2*time.Second) {
		t.Errorf("the connection of a request past the grace was still open 2 s after the stop returned")
	}
}

// A request that ends within the grace is answered whole.
func TestStopLetsARequestInFlightFinish(t *testing.T) {
	started := make(chan struct{})
	addr, stop := listen(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		time.Sleep(httpserve.Grace / 5)
		_, _ = io.WriteString(w, "done")
	}))
	got := make(chan string, 1)
	go func() {
		resp, err := http.Get("http://" + addr + "/")
		if err != nil {
			got <- err.Error()
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		got <- string(b)
	}()
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the request never reached its handler")
	}
	stop()
	if body := <-got; body != "done" {
		t.Errorf("request in flight at the stop got %q, want done", body)
	}
}

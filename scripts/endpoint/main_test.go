package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestEndpoint checks the answers (200, 422 for "fail") and that each
// request's line counts the tenant's requests in flight.
func TestEndpoint(t *testing.T) {
	var mu sync.Mutex
	var out bytes.Buffer
	e := newEndpoint(time.Second, writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return out.Write(p)
	}))
	srv := httptest.NewServer(e)
	defer srv.Close()
	post := func(body string) int {
		req, _ := http.NewRequest("POST", srv.URL+"/jobs/acme", strings.NewReader(body))
		req.Header.Set("Throttler-Tenant", "acme")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	var wg sync.WaitGroup
	codes := make([]int, 2)
	for i, body := range []string{"ok", "please fail"} {
		wg.Add(1)
		go func() { defer wg.Done(); codes[i] = post(body) }()
	}
	wg.Wait()
	if codes[0] != 200 || codes[1] != 422 {
		t.Fatalf("answers %v, want 200 and 422", codes)
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(out.String(), "tenant=acme running=2") {
		t.Fatalf("no line counted two requests of acme at once:\n%s", out.String())
	}
}

// writerFunc is a function as an io.Writer.
type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

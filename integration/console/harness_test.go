// Package console tests the admin console in a real browser: headless
// Chromium (Debian's chromium package, which scripts/test.sh installs),
// driven with chromedp, against workers with real NATS and Redis.
package console

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/consumer"
	"github.com/throttler/throttler/internal/app"
	"github.com/throttler/throttler/internal/testenv"
)

// token is the workers' THROTTLER_ADMIN_TOKEN in these tests.
const token = "console-test-token-0123456789"

// fleet is one test's servers and workers.
type fleet struct {
	t     *testing.T
	nc    *nats.Conn
	js    jetstream.JetStream
	cfg   *app.Settings
	url   string // the first worker's console, http://127.0.0.1:PORT
	vars  map[string]string
	redis *testenv.Redis
	nats  *testenv.NATS
	// handler runs the workers' admitted jobs; nil forwards them to
	// done.{tenant}.
	handler consumer.Handler
}

// setup starts NATS and Redis and one worker serving the console, with
// vars over the defaults; it returns once the worker's console answers
// and the worker is ready.
func setup(t *testing.T, vars map[string]string) *fleet {
	t.Helper()
	return setupWith(t, vars, nil)
}

// setupWith is setup with the workers running handler.
func setupWith(t *testing.T, vars map[string]string, handler consumer.Handler) *fleet {
	t.Helper()
	n := testenv.StartNATS(t, "")
	r := testenv.StartRedis(t)
	nc := n.Connect(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	f := &fleet{t: t, nc: nc, js: js, redis: r, nats: n, vars: vars, handler: handler}
	f.url = f.startWorker(testenv.FreeAddr(t))
	return f
}

// startWorker starts a worker serving the console on addr (none when "")
// and returns the console's URL once it is ready.
func (f *fleet) startWorker(addr string) string {
	f.t.Helper()
	all := map[string]string{
		"NATS_URL": f.nats.URL(), "REDIS_URL": f.redis.URL(),
		"THROTTLER_SHUTDOWN_TIMEOUT": "5s", "THROTTLER_ADMIN_ADDR": addr, "THROTTLER_ADMIN_TOKEN": token,
	}
	for k, v := range f.vars {
		all[k] = v
	}
	cfg, err := app.LoadSettingsFrom(all)
	if err != nil {
		f.t.Fatalf("config: %v", err)
	}
	f.cfg = cfg
	nc := f.nats.Connect(f.t)
	rdb, err := app.NewRedis(cfg.Config, 1)
	if err != nil {
		f.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	log := slog.New(slog.NewTextHandler(logSink(), &slog.HandlerOptions{Level: slog.LevelInfo}))
	go func() { done <- app.Run(ctx, cfg, app.Options{NATS: nc, Redis: rdb, Logger: log, Handler: f.handler}) }()
	f.t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				f.t.Errorf("worker: %v", err)
			}
		case <-time.After(30 * time.Second):
			f.t.Errorf("worker did not stop within 30s")
		}
		_ = rdb.Close()
	})
	if addr == "" {
		return ""
	}
	url := "http://" + addr
	testenv.Eventually(f.t, 20*time.Second, "the worker's console answers and the worker is ready", func() bool {
		var fl struct {
			Workers []struct{ Ready bool } `json:"workers"`
		}
		if f.get(url, "/api/v1/fleet", &fl) != http.StatusOK {
			return false
		}
		for _, w := range fl.Workers {
			if w.Ready {
				return true
			}
		}
		return false
	})
	return url
}

// get fetches path from the console at base with the token into v and
// returns the status.
func (f *fleet) get(base, path string, v any) int { return f.call("GET", base, path, "", v) }

// call sends method path with body (JSON, "" for none) to the console at
// base with the token, decodes the answer into v and returns the status.
func (f *fleet) call(method, base, path, body string, v any) int {
	req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	defer res.Body.Close()
	if v != nil {
		_ = json.NewDecoder(res.Body).Decode(v)
	}
	return res.StatusCode
}

// logSink is where worker logs go: stderr with -v, else nowhere.
func logSink() io.Writer {
	if testing.Verbose() {
		return os.Stderr
	}
	return io.Discard
}

// publish publishes n jobs of tenant.
func (f *fleet) publish(tenant string, n int) {
	f.t.Helper()
	f.publishTo("jobs."+tenant, n)
}

// publishTo publishes n jobs to subject.
func (f *fleet) publishTo(subject string, n int) {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range n {
		if _, err := f.js.PublishAsync(subject, []byte(fmt.Sprintf(`{"n":%d}`, i))); err != nil {
			f.t.Fatalf("publish: %v", err)
		}
	}
	select {
	case <-f.js.PublishAsyncComplete():
	case <-ctx.Done():
		f.t.Fatal("publishes not acked within 30s")
	}
}

// browser starts headless Chromium with a fresh profile; with auth it
// sends that Authorization header with every request. A missing browser
// fails the test: scripts/test.sh installs Debian's chromium.
func browser(t testing.TB, auth string) context.Context {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("no chromium in PATH (scripts/deps.sh's ensure_chromium installs Debian's): %v", err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.NoFirstRun,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if _, err := chromedp.Call(ctx, network.Enable, network.EnableParams{}); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	if auth != "" {
		if _, err := chromedp.Call(ctx, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{Headers: network.Headers{"Authorization": auth}}); err != nil {
			t.Fatalf("setting the browser's Authorization header: %v", err)
		}
	}
	return ctx
}

// do runs steps in the browser within d, failing the test with what on
// error.
func do(t testing.TB, ctx context.Context, d time.Duration, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	if err := chromedp.Do(c, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// waitJS waits until the JavaScript expression expr is truthy.
func waitJS(expr string) chromedp.Action[chromedp.Void] {
	return chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(0))
}

// clearInput empties the input the CSS selector sel matches.
func clearInput(sel string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := chromedp.Evaluate[chromedp.Void](fmt.Sprintf("void (document.querySelector(%q).value = '')", sel))(ctx, t)
		return err
	})
}

// eval evaluates the JavaScript expression expr, awaiting a promise.
func eval[T any](t testing.TB, ctx context.Context, expr string) T {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	v, err := chromedp.Run(c, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("evaluating %s: %v", expr, err)
	}
	return v
}

// text returns the text of the first element the CSS selector sel
// matches.
func text(t testing.TB, ctx context.Context, sel string) string {
	t.Helper()
	return strings.TrimSpace(eval[string](t, ctx, fmt.Sprintf("document.querySelector(%q)?.textContent ?? ''", sel)))
}

// screenshot saves a PNG of the page to docs/ when THROTTLER_SCREENSHOTS
// names that directory.
func screenshot(t testing.TB, ctx context.Context, name string) {
	t.Helper()
	dir := os.Getenv("THROTTLER_SCREENSHOTS")
	if dir == "" {
		return
	}
	c, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	png, err := chromedp.Run(c, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if err := os.WriteFile(dir+"/"+name, png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// itoa formats n for a JavaScript expression.
func itoa(n int) string { return fmt.Sprint(n) }

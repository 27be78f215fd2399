package console

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go"

	"github.com/throttler/throttler/internal/testenv"
)

// TestWrongTokenSeesNothing: a browser sending a wrong token gets the
// form and no data, and its page's own requests to the API are refused;
// typing a wrong token in the form is refused too; typing the right one
// opens the console, whose fleet page lists the worker.
func TestWrongTokenSeesNothing(t *testing.T) {
	f := setup(t, nil)
	ctx := browser(t, "Bearer wrong-token-0123456789")
	do(t, ctx, 15*time.Second, "opening the console with a wrong token",
		chromedp.Navigate(f.url+"/#/tenants"),
		waitJS(`!document.getElementById('login').hidden`))
	if got := eval[string](t, ctx, `document.getElementById('view').textContent.trim()`); got != "" {
		t.Fatalf("with a wrong token the page shows %q", got)
	}
	if eval[bool](t, ctx, `!document.getElementById('nav').hidden`) {
		t.Fatal("with a wrong token the page shows its sections")
	}
	for _, path := range []string{"/api/v1/tenants", "/api/v1/fleet", "/api/v1/dlq", "/api/v1/tenants/acme"} {
		if st := eval[int](t, ctx, `fetch('`+path+`').then(r => r.status)`); st != 401 {
			t.Errorf("the page's request to %s with a wrong token: %d, want 401", path, st)
		}
	}

	// A browser without the header types tokens into the form.
	ctx = browser(t, "")
	do(t, ctx, 15*time.Second, "typing a wrong token",
		chromedp.Navigate(f.url),
		waitJS(`!document.getElementById('login').hidden`),
		chromedp.SendKeys(chromedp.CSS("#token"), "not-the-token-0123456789"),
		chromedp.Click(chromedp.CSS("#login-form button[type=submit]")),
		waitJS(`document.getElementById('login-error').textContent.includes('wrong')`))
	if strings.Contains(eval[string](t, ctx, `location.href`), "token") {
		t.Fatal("the token went into the address bar")
	}
	do(t, ctx, 15*time.Second, "typing the right token",
		clearInput("#token"),
		chromedp.SendKeys(chromedp.CSS("#token"), token),
		chromedp.Click(chromedp.CSS("#login-form button[type=submit]")),
		waitJS(`document.getElementById('login').hidden && !document.getElementById('nav').hidden`),
		chromedp.Navigate(f.url+"/#/fleet"),
		waitJS(`document.querySelectorAll('#workers-table tbody tr').length === 1 && document.querySelector('#workers-table').textContent.includes('ready')`))
	if href := eval[string](t, ctx, `location.href`); strings.Contains(href, token) {
		t.Fatalf("the token is in the address bar: %s", href)
	}
}

// TestLimitChangeFromThePage: a spec the parser refuses shows the parser's
// message and changes nothing; a good one, saved from the tenant's page,
// is what the workers enforce within 1 s: a burst of 40 jobs published
// 1 s after saving runs at once, where the old limit (1/s:1) would have
// run one a second. Removing it gives the tenant back the environment's.
func TestLimitChangeFromThePage(t *testing.T) {
	f := setup(t, map[string]string{"THROTTLER_TENANT_LIMITS": "acme=1/s:1"})
	var forwarded atomic.Int64
	sub, err := f.nc.Subscribe("done.acme", func(*nats.Msg) { forwarded.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	ctx := browser(t, "Bearer "+token)
	do(t, ctx, 15*time.Second, "opening acme's page",
		chromedp.Navigate(f.url+"/#/tenant/acme"),
		waitJS(`document.getElementById('limits-value')?.textContent === '1/s:1'`))
	if !eval[bool](t, ctx, `document.getElementById('login').hidden && document.getElementById('forget').hidden`) {
		t.Fatal("a browser sending the token is shown the form")
	}

	do(t, ctx, 10*time.Second, "saving a bad spec",
		chromedp.SendKeys(chromedp.CSS("#limits-spec"), "50/x"),
		chromedp.Click(chromedp.CSS("#limits-save")),
		waitJS(`document.getElementById('limits-error').textContent !== ''`))
	if msg := text(t, ctx, "#limits-error"); !strings.Contains(msg, "50/x") {
		t.Fatalf("the bad spec's message %q does not say what is wrong with it", msg)
	}
	var limits struct{ Limits string }
	if f.get(f.url, "/api/v1/tenants/acme/limits", &limits); limits.Limits != "1/s:1" {
		t.Fatalf("after a bad spec acme's limits are %q, want 1/s:1 unchanged", limits.Limits)
	}

	do(t, ctx, 10*time.Second, "saving 100/s:40",
		clearInput("#limits-spec"),
		chromedp.SendKeys(chromedp.CSS("#limits-spec"), "100/s:40"),
		chromedp.Click(chromedp.CSS("#limits-save")),
		waitJS(`document.getElementById('limits-value')?.textContent === '100/s:40'`))
	saved := time.Now()
	if msg := text(t, ctx, "#limits-error"); msg != "" {
		t.Fatalf("saving a good spec shows %q", msg)
	}
	time.Sleep(time.Until(saved.Add(time.Second))) // the change's allowance, not a wait for something to happen
	f.publish("acme", 40)
	testenv.Eventually(t, 3*time.Second, "the 40 jobs published 1 s after the change all run at once", func() bool {
		return forwarded.Load() == 40
	})
	do(t, ctx, 10*time.Second, "acme's buckets shown",
		waitJS(`document.querySelectorAll('#buckets meter').length === 1`))

	do(t, ctx, 10*time.Second, "back to the environment's 1/s:1",
		chromedp.Click(chromedp.CSS("#limits-remove")),
		waitJS(`document.getElementById('limits-value')?.textContent === '1/s:1' && document.getElementById('limits-remove').hidden`))
	if f.get(f.url, "/api/v1/tenants/acme/limits", &limits); limits.Limits != "1/s:1" {
		t.Fatalf("after the removal acme's limits are %q, want the environment's 1/s:1", limits.Limits)
	}
}

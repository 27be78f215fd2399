package console

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/header"
	"github.com/throttler/throttler/internal/testenv"
)

// TestTenantsPageFloodingAndQuiet: a tenant flooding its limit and a quiet
// one both show on the tenants page, the flooding one held by its limit,
// the quiet one running; the filter keeps only the tenant it names.
func TestTenantsPageFloodingAndQuiet(t *testing.T) {
	f := setup(t, map[string]string{"THROTTLER_TENANT_LIMITS": "flood=5/s:5,quiet=100/s"})
	f.publish("flood", 300)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the quiet tenant: a job every 200 ms, so it always has traffic
		defer wg.Done()
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				_, _ = f.js.Publish(context.Background(), "jobs.quiet", []byte("q"))
			}
		}
	}()
	t.Cleanup(func() { close(stop); wg.Wait() })

	ctx := browser(t, "Bearer "+token)
	do(t, ctx, 20*time.Second, "the tenants page lists both tenants, the flooding one held by its limit",
		chromedp.Navigate(f.url+"/#/tenants"),
		waitJS(`(() => {
			const flood = document.querySelector('#tenants tr[data-tenant="flood"] td.state');
			const quiet = document.querySelector('#tenants tr[data-tenant="quiet"] td.state');
			return flood && quiet && flood.textContent.includes('held by') && flood.textContent.includes('5/s') && quiet.textContent === 'running';
		})()`))
	// Live: the page refreshes by itself, without a reload.
	renders := eval[int](t, ctx, `Number(document.getElementById('tenants').dataset.renders)`)
	do(t, ctx, 5*time.Second, "the page refreshes by itself",
		waitJS(`Number(document.getElementById('tenants').dataset.renders) >= `+itoa(renders+2)))
	screenshot(t, ctx, "console-tenants.png")
	do(t, ctx, 5*time.Second, "filtering by name",
		chromedp.SendKeys(chromedp.CSS("#filter"), "flo"),
		waitJS(`document.querySelectorAll('#tenants tbody tr[data-tenant]').length === 1 && document.querySelector('#tenants tbody tr[data-tenant="flood"]') !== null`))
	do(t, ctx, 20*time.Second, "opening the flooding tenant's page from its row",
		chromedp.Click(chromedp.CSS(`#tenants tr[data-tenant="flood"] a`)),
		waitJS(`document.getElementById('held-by')?.textContent.includes('5/s') && document.querySelectorAll('#buckets meter').length === 1`),
		waitJS(`Number(document.getElementById('chart').dataset.points) >= 6`))
	screenshot(t, ctx, "console-tenant.png")
}

// TestPauseAndResumeFromThePage: pausing from the tenant's page holds its
// jobs (the page shows it paused and its jobs waiting as paused, uncharged);
// resuming from the page runs every one of them.
func TestPauseAndResumeFromThePage(t *testing.T) {
	f := setup(t, nil)
	var forwarded atomic.Int64
	sub, err := f.nc.Subscribe("done.acme", func(*nats.Msg) { forwarded.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	ctx := browser(t, "Bearer "+token)
	do(t, ctx, 15*time.Second, "pausing acme from its page",
		chromedp.Navigate(f.url+"/#/tenant/acme"),
		waitJS(`document.getElementById('limits-value') !== null`),
		chromedp.SendKeys(chromedp.CSS("#pause-reason"), "console test"),
		chromedp.Click(chromedp.CSS("#pause")),
		waitJS(`document.getElementById('tenant-state').dataset.paused === '1'`))
	// The workers apply a pause within a second.
	time.Sleep(time.Second) // the pause's allowance, not a wait for something to happen
	f.publish("acme", 10)
	do(t, ctx, 15*time.Second, "the page shows acme's 10 jobs waiting as paused",
		waitJS(`(() => { const dd = [...document.querySelectorAll('#waiting dt')].find(d => d.textContent === 'Paused'); return dd && dd.nextElementSibling.textContent === '10'; })()`))
	if n := forwarded.Load(); n != 0 {
		t.Fatalf("%d jobs of a paused tenant ran", n)
	}
	do(t, ctx, 10*time.Second, "resuming acme from its page",
		chromedp.Click(chromedp.CSS("#resume")),
		waitJS(`document.getElementById('tenant-state').dataset.paused === '0'`))
	testenv.Eventually(t, 15*time.Second, "acme's 10 jobs run after the resume", func() bool { return forwarded.Load() == 10 })
}

// TestAPIRemovesALimit: DELETE /tenants/{tenant}/limits removes the
// tenant's value from the limits bucket, as `throttler limits rm`, and the
// environment's limit applies again; a second DELETE finds none and
// changes nothing.
func TestAPIRemovesALimit(t *testing.T) {
	f := setup(t, map[string]string{"THROTTLER_TENANT_LIMITS": "acme=7/s"})
	type change struct {
		Before, After string
		Revision      uint64
		Removed       *bool
	}
	var set change
	if st := f.call("PUT", f.url, "/api/v1/tenants/acme/limits", `{"spec": "2/s"}`, &set); st != 200 || set.After != "2/s:2" || set.Removed != nil {
		t.Fatalf("PUT 2/s: status %d, %+v", st, set)
	}
	var rm change
	if st := f.call("DELETE", f.url, "/api/v1/tenants/acme/limits", "", &rm); st != 200 || rm.Removed == nil || !*rm.Removed || rm.Before != "2/s:2" || rm.After != "7/s:7" || rm.Revision != set.Revision {
		t.Fatalf("DELETE: status %d, %+v; want the bucket's 2/s:2 removed (revision %d), the environment's 7/s:7 applying", st, rm, set.Revision)
	}
	var view struct{ Limits, Where string }
	if f.get(f.url, "/api/v1/tenants/acme/limits", &view); view.Limits != "7/s:7" || view.Where != "THROTTLER_TENANT_LIMITS" {
		t.Fatalf("after DELETE acme's limits are %+v, want 7/s:7 from THROTTLER_TENANT_LIMITS", view)
	}
	var again change
	if st := f.call("DELETE", f.url, "/api/v1/tenants/acme/limits", "", &again); st != 200 || again.Removed == nil || *again.Removed || again.After != "7/s:7" {
		t.Fatalf("a second DELETE: status %d, %+v; want removed false, nothing changed", st, again)
	}
}

// TestAPILimitRaiseBringsTheBacklogBack: PUT /tenants/{tenant}/limits that
// raises a tenant's limit brings its jobs moved off the consumer for slots
// under the old limit back, as `throttler limits set` does, and says how
// many: the backlog (20 s of it under 2/s) runs within seconds, each job
// once.
func TestAPILimitRaiseBringsTheBacklogBack(t *testing.T) {
	f := setup(t, map[string]string{"THROTTLER_TENANT_LIMITS": "acme=2/s"})
	ids := make(chan string, 100)
	sub, err := f.nc.Subscribe("done.acme", func(m *nats.Msg) { ids <- m.Header.Get(header.JobID) })
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	const jobs = 40
	f.publish("acme", jobs)
	st, err := f.js.Stream(context.Background(), f.cfg.Stream)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, "acme's backlog moved off the consumer", func() bool {
		info, err := st.Info(context.Background(), jetstream.WithSubjectFilter(f.cfg.Schedules.All()))
		return err == nil && info.State.Msgs > 0
	})
	var set struct {
		After       string
		BroughtBack int `json:"brought_back"`
	}
	if st := f.call("PUT", f.url, "/api/v1/tenants/acme/limits", `{"spec": "1000/s"}`, &set); st != 200 || set.BroughtBack == 0 {
		t.Fatalf("PUT 1000/s: status %d, %+v; want the moved jobs brought back", st, set)
	}
	t.Logf("PUT 1000/s: %+v", set)
	seen := map[string]bool{}
	deadline := time.After(10 * time.Second)
	for len(seen) < jobs {
		select {
		case id := <-ids:
			if seen[id] {
				t.Fatalf("job %s forwarded twice", id)
			}
			seen[id] = true
		case <-deadline:
			t.Fatalf("%d of %d jobs forwarded within 10 s of the raise", len(seen), jobs)
		}
	}
}

package console

import (
	"context"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestLevelsPage: the Levels page lists the global limit and each group's
// (from the environment and from the limits bucket), with where each
// comes from, and the jobs a level holds waiting for a
// turn with the tenants next in line; a tenant's page names the level
// holding its jobs.
func TestLevelsPage(t *testing.T) {
	f := setup(t, map[string]string{
		"THROTTLER_GLOBAL_LIMIT": "2/s:2", "THROTTLER_GROUP_FROM": "subject:2", "THROTTLER_GROUP_LIMITS": "org-1=100/s",
	})
	// acme's jobs on jobs.acme.org-1: group org-1 (the subject's second
	// token after the prefix), and the global 2/s holds most of them.
	f.publishTo("jobs.acme.org-1", 200)
	// A group whose limit is only in the limits bucket, set live.
	kv, err := f.js.KeyValue(context.Background(), f.cfg.LimitsBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(context.Background(), "group.org-3", []byte("5/s")); err != nil {
		t.Fatal(err)
	}
	ctx := browser(t, "Bearer "+token)
	do(t, ctx, 30*time.Second, "the Levels page lists the global and the group's limits, and acme next in line at the global one",
		chromedp.Navigate(f.url+"/#/levels"),
		waitJS(`(() => {
			const g = document.querySelector('#levels-table tr[data-level="_global"]');
			const o = document.querySelector('#levels-table tr[data-level="group.org-1"]');
			const b = document.querySelector('#levels-table tr[data-level="group.org-3"]');
			return g && o && b && b.textContent.includes('5/s') && b.textContent.includes('bucket') && g.textContent.includes('2/s') && g.textContent.includes('THROTTLER_GLOBAL_LIMIT') &&
				g.textContent.includes('acme') && o.textContent.includes('100/s') && o.textContent.includes('THROTTLER_GROUP_LIMITS');
		})()`))
	if n := eval[int](t, ctx, `Number(document.querySelector('#levels-table tr[data-level="_global"] td.num').textContent.replace(/,/g, ''))`); n < 1 {
		t.Errorf("the global level shows %d jobs waiting for a turn, want some", n)
	}
	screenshot(t, ctx, "console-levels.png")
	do(t, ctx, 30*time.Second, "acme's page names the global limit and the level holding its jobs",
		chromedp.Navigate(f.url+"/#/tenant/acme"),
		waitJS(`(() => {
			const el = document.getElementById('tenant-levels');
			const g = el && el.querySelector('[data-level="_global"]');
			return g && el.textContent.includes('2/s') && el.textContent.includes('THROTTLER_GLOBAL_LIMIT') &&
				el.textContent.includes('subject:2') && g.textContent.includes('waiting for a turn') && /holds [1-9]/.test(g.textContent);
		})()`))
}

package consumer

import (
	"testing"
	"time"
)

// TestDownstreamHoldsAfter: a tenant is held until the end recorded for
// it, however many holds of other tenants end before or after; once every
// hold ended, the next one forgets them.
func TestDownstreamHoldsAfter(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	now := t0
	h := &downstreamHolds{now: func() time.Time { return now }}
	if _, held := h.after("acme", now); held {
		t.Fatal("acme held before any hold")
	}
	h.note("acme", t0.Add(2*time.Second))
	h.note("globex", t0.Add(5*time.Second))
	h.note("acme", t0.Add(time.Second)) // earlier: the later end stands
	for _, c := range []struct {
		tenant string
		at     time.Duration
		held   bool
		until  time.Duration
	}{
		{"acme", 0, true, 2 * time.Second},
		{"globex", time.Second, true, 5 * time.Second},
		{"initech", time.Second, false, 0},
		{"acme", 3 * time.Second, false, 0},
		{"globex", 4 * time.Second, true, 5 * time.Second},
		{"globex", 5 * time.Second, false, 0},
	} {
		until, held := h.after(c.tenant, t0.Add(c.at))
		if held != c.held || (held && !until.Equal(t0.Add(c.until))) {
			t.Errorf("%s at +%v: held %v until %v, want %v until +%v", c.tenant, c.at, held, until, c.held, c.until)
		}
	}
	now = t0.Add(6 * time.Second)
	h.note("initech", t0.Add(8*time.Second))
	if got := h.keys(t0); len(got) != 1 || got[0] != "initech" {
		t.Errorf("tenants kept after every earlier hold ended: %v, want only initech", got)
	}
	if _, held := h.after("initech", now); !held {
		t.Error("initech not held by its new hold")
	}
}

package throttle_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/throttler/throttler/throttle"
)

// A calendar window is a term of a spec like any other; a bad unit, zone
// or N is refused.
func TestParseCalendar(t *testing.T) {
	for _, spec := range []string{"window:5/s", "window:10/d@America/New_York", "100/s:200+window:1000/mo+sliding:5/m", "window:3/w@Europe/Paris+shadow", "window:1/h+window:2/h@Asia/Tokyo"} {
		p, err := throttle.ParsePolicy(spec, 0)
		if err != nil {
			t.Errorf("ParsePolicy(%q): %v", spec, err)
			continue
		}
		if q, err := throttle.ParsePolicy(p.String(), 0); err != nil || q.String() != p.String() {
			t.Errorf("%q read back from %q: %v, %v", p.String(), spec, q, err)
		}
	}
	for _, spec := range []string{"window:0/s", "window:5", "window:5/y", "window:5/2s", "window:1.5/d", "window:5/d@Mars/Olympus", "window:5/d+window:6/d", "window:5/d@", "window:5/d@Local"} {
		if _, err := throttle.ParsePolicy(spec, 0); err == nil {
			t.Errorf("ParsePolicy(%q) accepted", spec)
		}
	}
	// A zone with a + is cut in two terms; the error says so, and only
	// then.
	_, err := throttle.ParsePolicy("window:10/d@Etc/GMT+5", 0)
	if err == nil || !strings.Contains(err.Error(), `cut the time zone "Etc/GMT+5" in two`) {
		t.Errorf("ParsePolicy of a zone with a +: %v, want it to name the zone cut", err)
	}
	if _, err := throttle.ParsePolicy("window:10/d@Europe/Paris+abc", 0); err == nil || strings.Contains(err.Error(), "time zone") {
		t.Errorf("ParsePolicy of a bad term after a zone: %v, want the term's error alone", err)
	}
}

// Exactly N per window: the jobs over it are reserved into the next
// windows in order (past the horizon too), and back at their slot they run
// uncharged; a change of N grants nothing.
func TestCalendarReservesInOrder(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	w := throttle.CalendarWindow(2, "mo", "")
	l := newLimiter(t, e.rdb, e.prefix, 10*time.Minute, throttle.Limits{w})
	t1 := time.Date(2026, 1, 31, 23, 0, 0, 0, time.UTC)
	feb, mar := time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	want := []time.Time{t1, t1, feb, feb, mar, mar}
	for i, slot := range want {
		d := decide(t, l, throttle.Request{Tenant: "acme", JobID: fmt.Sprint("j", i), At: t1})
		if slot.Equal(t1) && d.Outcome != throttle.Admitted {
			t.Fatalf("job %d: %+v, want admitted", i, d)
		}
		if !slot.Equal(t1) && (d.Outcome != throttle.Reserved || d.Wait != slot.Sub(t1)) {
			t.Fatalf("job %d: %+v, want reserved for %s", i, d, slot.Sub(t1))
		}
	}
	key := e.prefix + ":{acme}:c:mo@UTC"
	before := e.rdb.HGetAll(ctx, key).Val()
	if d := decide(t, l, throttle.Request{Tenant: "acme", JobID: "j2", At: feb}); d.Outcome != throttle.Admitted {
		t.Fatalf("j2 back at its slot: %+v, want admitted", d)
	}
	if d := decide(t, l, throttle.Request{Tenant: "acme", JobID: "j4", At: feb}); d.Outcome != throttle.Reserved || d.Wait != mar.Sub(feb) {
		t.Fatalf("j4 back early: %+v, want the rest of its wait", d)
	}
	after := e.rdb.HGetAll(ctx, key).Val()
	if fmt.Sprint(after[fmt.Sprint(mar.UnixMicro())]) != "2" || len(after) > len(before) {
		t.Fatalf("counts %v after jobs came back, %v before: charged twice", after, before)
	}
	if ttl := e.rdb.PTTL(ctx, key).Val(); ttl < time.Until(time.Date(2026, 4, 1, 0, 0, 0, 0, time.UTC))-time.Until(feb) {
		t.Fatalf("TTL %s: want until the end of March", ttl)
	}
	// A live change of N to 3 in February: March keeps its count of 2 (a
	// new job never passes those placed before it), so it takes one more,
	// not three; the next goes to April.
	l3 := newLimiter(t, e.rdb, e.prefix, 10*time.Minute, throttle.Limits{throttle.CalendarWindow(3, "mo", "")})
	apr := time.Date(2026, 4, 1, 0, 0, 0, 0, time.UTC)
	for i, slot := range []time.Time{mar, apr} {
		if d := decide(t, l3, throttle.Request{Tenant: "acme", JobID: fmt.Sprint("k", i), At: feb}); d.Outcome != throttle.Reserved || d.Wait != slot.Sub(feb) {
			t.Fatalf("k%d under N=3: %+v, want reserved for %s", i, d, slot.Sub(feb))
		}
	}
}

// A day in New York across the spring change is 23 hours: the job over it
// waits until local midnight.
func TestCalendarDayInAZone(t *testing.T) {
	e := setup(t)
	ny, _ := time.LoadLocation("America/New_York")
	l := newLimiter(t, e.rdb, e.prefix, time.Hour, throttle.Limits{throttle.CalendarWindow(1, "d", "America/New_York")})
	at := time.Date(2026, 3, 8, 0, 30, 0, 0, ny)
	if d := decide(t, l, throttle.Request{Tenant: "acme", JobID: "a", At: at}); d.Outcome != throttle.Admitted {
		t.Fatalf("a: %+v", d)
	}
	if d := decide(t, l, throttle.Request{Tenant: "acme", JobID: "b", At: at}); d.Outcome != throttle.Reserved || d.Wait != 22*time.Hour+30*time.Minute {
		t.Fatalf("b: %+v, want reserved for 22h30m (a day of 23h)", d)
	}
	// Without an id nothing is reserved: limited until the last window
	// passed starts.
	if d := decide(t, l, throttle.Request{Tenant: "acme", At: at}); d.Outcome != throttle.Limited {
		t.Fatalf("no id: %+v, want limited", d)
	}
}

// Shadow mode admits and counts in keys of its own; a bucket and a window
// together wait for the longer.
func TestCalendarShadowAndCombined(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	rules := throttle.Rules{Default: throttle.Policy{Limits: throttle.Limits{throttle.PerSecond(1, 1)}}, Tenants: map[string]throttle.Policy{
		"sh": {Limits: throttle.Limits{throttle.CalendarWindow(1, "m", "")}, Shadow: true},
		"co": {Limits: throttle.Limits{throttle.PerSecond(1, 1), throttle.CalendarWindow(2, "m", "")}},
	}}
	l, err := throttle.New(e.rdb, throttle.Options{Policies: rules, Horizon: time.Hour, Prefix: e.prefix})
	if err != nil {
		t.Fatal(err)
	}
	t1 := time.Date(2026, 12, 7, 10, 0, 59, 500_000_000, time.UTC)
	for i := range 3 {
		if d := decide(t, l, throttle.Request{Tenant: "sh", JobID: fmt.Sprint(i), At: t1}); d.Outcome != throttle.Admitted || !d.Shadow {
			t.Fatalf("shadow %d: %+v, want admitted in shadow", i, d)
		}
	}
	if n := e.rdb.Exists(ctx, e.prefix+":{sh}:k:m@UTC").Val(); n != 1 {
		t.Fatalf("the shadow count is not in its own key")
	}
	// co: the first runs; the second waits 1s for the bucket, into the
	// next minute; the third 2 s for the bucket, the minute holding one.
	want := []time.Duration{0, time.Second, 2 * time.Second, 60*time.Second + 500*time.Millisecond}
	for i, w := range want {
		d := decide(t, l, throttle.Request{Tenant: "co", JobID: fmt.Sprint(i), At: t1})
		if d.Wait != w {
			t.Fatalf("co %d: %+v, want wait %s", i, d, w)
		}
	}
}

// Two Limiters on one Redis, deciding at once, admit N per window in all.
func TestCalendarConcurrent(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	w := throttle.CalendarWindow(50, "h", "")
	ls := []*throttle.Limiter{newLimiter(t, e.rdb, e.prefix, 0, throttle.Limits{w}), newLimiter(t, e.rdb, e.prefix, 0, throttle.Limits{w})}
	at := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	admitted := 0
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				d, err := ls[g%2].Decide(ctx, throttle.Request{Tenant: "acme", At: at})
				if err != nil {
					t.Error(err)
					return
				}
				if d.Outcome == throttle.Admitted {
					mu.Lock()
					admitted++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if admitted != 50 {
		t.Fatalf("admitted %d, want 50", admitted)
	}
}

// Peek reads a calendar window as the engine decides it: its wait is the
// wait of the next job of cost 1, and it shows the count of the window
// holding now and when that window resets.
func TestCalendarPeekAgrees(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	w := throttle.CalendarWindow(3, "s", "")
	l := newLimiter(t, e.rdb, e.prefix, 2*time.Second, throttle.Limits{throttle.PerSecond(100, 100), w})
	start := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	for i := range 40 {
		at := start.Add(time.Duration(i) * 130 * time.Millisecond)
		snap, err := l.Peek(ctx, "acme", at)
		if err != nil {
			t.Fatalf("Peek: %v", err)
		}
		// A job without an id is decided, uncharged when it must wait.
		d := decide(t, l, throttle.Request{Tenant: "acme", At: at})
		if d.Wait != snap.Wait {
			t.Fatalf("step %d at %s: Peek says a job waits %s (%+v), the engine %+v", i, at, snap.Wait, snap.Buckets[1], d)
		}
		b := snap.Buckets[1]
		if want := at.Truncate(time.Second).Add(time.Second); !b.ResetsAt.Equal(want) || b.Tokens != float64(w.Rate-b.InWindow) {
			t.Fatalf("step %d: the window in Peek: %+v, want it to reset at %s", i, b, want)
		}
		if d.Outcome == throttle.Admitted && b.Tokens < 1 {
			t.Fatalf("step %d: admitted, Peek saw %+v", i, b)
		}
		// And jobs with ids, at most steps, reserve ahead.
		if i%4 != 3 {
			decide(t, l, throttle.Request{Tenant: "acme", JobID: fmt.Sprint("j", i), At: at})
		}
	}
	// A month with its count and a reservation into the next.
	m := throttle.CalendarWindow(2, "mo", "Europe/Paris")
	lm := newLimiter(t, e.rdb, e.prefix, time.Minute, throttle.Limits{m})
	paris, _ := time.LoadLocation("Europe/Paris")
	at := time.Date(2026, 3, 30, 12, 0, 0, 0, paris)
	for i := range 3 {
		decide(t, lm, throttle.Request{Tenant: "mo", JobID: fmt.Sprint("m", i), At: at})
	}
	snap, err := lm.Peek(ctx, "mo", at)
	if err != nil {
		t.Fatalf("Peek: %v", err)
	}
	apr, may := time.Date(2026, 4, 1, 0, 0, 0, 0, paris), time.Date(2026, 5, 1, 0, 0, 0, 0, paris)
	b := snap.Buckets[0]
	if !b.Stored || b.InWindow != 2 || b.Tokens != 0 || !b.ResetsAt.Equal(apr) || !b.ReservedUntil.Equal(apr) || !b.FullAt.Equal(may) || snap.Wait != apr.Sub(at) {
		t.Fatalf("the month in Peek: %+v, wait %s", b, snap.Wait)
	}
}

// window:N/UNIT:dlq reserves no later window: a job over it is limited,
// uncharged, until the window ends, held by that window; Peek agrees.
func TestCalendarDeadLetter(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	p, err := throttle.ParsePolicy("10/s:10+window:2/d@Europe/Paris:dlq", 0)
	if err != nil || p.String() != "10/s:10+window:2/d@Europe/Paris:dlq" || !p.Limits[1].DeadLetter {
		t.Fatalf("ParsePolicy: %v, %v", p, err)
	}
	if _, err := throttle.ParsePolicy("10/s:dlq", 0); err == nil {
		t.Fatal("a bucket with :dlq accepted")
	}
	l := newLimiter(t, e.rdb, e.prefix, time.Hour, p.Limits)
	paris, _ := time.LoadLocation("Europe/Paris")
	at := time.Date(2026, 12, 7, 22, 0, 0, 0, paris)
	midnight := time.Date(2026, 12, 8, 0, 0, 0, 0, paris)
	for i := range 4 {
		snap, err := l.Peek(ctx, "acme", at)
		if err != nil {
			t.Fatal(err)
		}
		d := decide(t, l, throttle.Request{Tenant: "acme", JobID: fmt.Sprint("j", i), At: at})
		if d.Wait != snap.Wait {
			t.Fatalf("job %d: Peek says a job waits %s, the engine %+v", i, snap.Wait, d)
		}
		if i < 2 && d.Outcome != throttle.Admitted {
			t.Fatalf("job %d: %+v, want admitted", i, d)
		}
		if i >= 2 && (d.Outcome != throttle.Limited || d.Wait != midnight.Sub(at) || !d.Binding.DeadLetter) {
			t.Fatalf("job %d: %+v, want limited until midnight by the dlq window", i, d)
		}
	}
	if c := e.rdb.HGetAll(ctx, e.prefix+":{acme}:c:d@Europe/Paris").Val(); len(c) != 1 || c[fmt.Sprint(time.Date(2026, 12, 7, 0, 0, 0, 0, paris).UnixMicro())] != "2" {
		t.Fatalf("counts %v: want 2 today, nothing reserved", c)
	}
	if d := decide(t, l, throttle.Request{Tenant: "acme", JobID: "next", At: midnight}); d.Outcome != throttle.Admitted {
		t.Fatalf("at midnight: %+v, want admitted", d)
	}
}

// A change of N, lowered or raised, keeps the jobs already reserved in
// their windows: back at their slots they run uncharged, in order, and a
// job decided after the change is placed behind them.
func TestCalendarChangeKeepsReservations(t *testing.T) {
	for _, n := range []int64{1, 3} {
		t.Run(fmt.Sprint("to ", n), func(t *testing.T) {
			e := setup(t)
			ctx := context.Background()
			l := newLimiter(t, e.rdb, e.prefix, 10*time.Minute, throttle.Limits{throttle.CalendarWindow(2, "m", "")})
			t1 := time.Date(2026, 3, 2, 10, 0, 10, 0, time.UTC)
			next := t1.Truncate(time.Minute).Add(time.Minute)
			for i := range 4 {
				decide(t, l, throttle.Request{Tenant: "acme", JobID: fmt.Sprint("j", i), At: t1})
			}
			key := e.prefix + ":{acme}:c:m@UTC"
			before := e.rdb.HGetAll(ctx, key).Val()
			changed := newLimiter(t, e.rdb, e.prefix, 10*time.Minute, throttle.Limits{throttle.CalendarWindow(n, "m", "")})
			later := decide(t, changed, throttle.Request{Tenant: "acme", JobID: "k", At: t1.Add(5 * time.Second)})
			if later.Outcome != throttle.Reserved || later.Wait < next.Sub(t1.Add(5*time.Second)) {
				t.Fatalf("a job after the change: %+v, want reserved no earlier than %s", later, next)
			}
			for _, id := range []string{"j2", "j3"} {
				if d := decide(t, changed, throttle.Request{Tenant: "acme", JobID: id, At: next}); d.Outcome != throttle.Admitted {
					t.Fatalf("%s back at its slot after N changed to %d: %+v, want admitted", id, n, d)
				}
			}
			after := e.rdb.HGetAll(ctx, key).Val()
			if w := fmt.Sprint(next.UnixMicro()); after[w] != before[w] && !(n == 3 && after[w] == "3") {
				t.Fatalf("the next minute counted %s after the change, %s before: charged twice", after[w], before[w])
			}
		})
	}
}

package throttle_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/throttler/throttler/throttle"
)

// A debt settled while jobs hold reserved slots moves every one of them
// later by the time the debt takes to pay (SHIFT, lua/head.lua): each
// keeps its charge and its place, none runs before the debt is paid, and
// a job decided after the settle is behind them all. Run on each of
// decide's paths: one job (one), a batch of one limit each (many), and
// two limits (the general path).
func TestSettleShiftsReservedSlots(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	for _, tc := range []struct {
		name   string
		limits throttle.Limits
		batch  bool
	}{
		{"one", throttle.Limits{throttle.PerSecond(10, 1)}, false},
		{"many", throttle.Limits{throttle.PerSecond(10, 1)}, true},
		{"general", throttle.Limits{throttle.PerSecond(10, 1), throttle.PerMinute(6000, 6000)}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := setup(t)
			l := newLimiter(t, e.rdb, e.prefix, time.Hour, tc.limits)
			c := newEngine(t, l)
			at := func(n int) time.Time { return t0.Add(ms(n)) }
			cp := func(id string, inc int64, fresh bool, n int) throttle.Copy {
				return throttle.Copy{Request: throttle.Request{Tenant: "acme", JobID: id, At: at(n)}, Incarnation: inc, Fresh: fresh}
			}
			// j0 runs; j1, j2, j3 hold slots at 100, 200, 300 ms.
			want := []throttle.Decision{admitted(0), reserved(ms(100)), reserved(ms(200)), reserved(ms(300))}
			for i := range 4 {
				d := decideCopy(t, c, cp(fmt.Sprint("j", i), int64(i+1), true, 0))
				if d.Outcome != want[i].Outcome || d.Wait != want[i].Wait {
					t.Fatalf("j%d at t0: %+v, want %+v", i, d, want[i])
				}
			}
			// j0 reports 6 for its 1: 5 more tokens, 500 ms of debt.
			got := settle(t, l, throttle.Settlement{Tenant: "acme", JobID: "j0", Charged: 1, Cost: 6, Slot: at(0), At: at(10)})
			if !got.Applied || got.Shift != ms(500) {
				t.Fatalf("settle: %+v, want applied with a shift of 500ms", got)
			}
			// Back at its old slot, j1 waits the debt out, uncharged.
			back := func(n int, ids ...int) []throttle.Result {
				cps := make([]throttle.Copy, len(ids))
				for k, i := range ids {
					cps[k] = cp(fmt.Sprint("j", i), int64(10+i), false, n)
				}
				if tc.batch {
					return c.DecideBatch(context.Background(), cps)
				}
				out := make([]throttle.Result, len(cps))
				for k := range cps {
					out[k].Decision, out[k].Err = c.Decide(context.Background(), cps[k])
				}
				return out
			}
			check := func(n int, r []throttle.Result, want ...throttle.Decision) {
				t.Helper()
				for k := range r {
					if r[k].Err != nil || r[k].Decision.Outcome != want[k].Outcome || r[k].Decision.Wait != want[k].Wait {
						t.Fatalf("at t0+%dms, job %d: %+v, want %+v", n, k, r[k], want[k])
					}
				}
			}
			check(100, back(100, 1, 2), reserved(ms(500)), reserved(ms(600)))
			// A job decided now is behind them all and the debt: the
			// bucket's empty time moved to 800 ms.
			d := decideCopy(t, c, cp("j4", 5, true, 100))
			if d.Outcome != throttle.Reserved || d.Wait != ms(800) {
				t.Fatalf("j4 at t0+100ms: %+v, want reserved in 800ms", d)
			}
			// The moved slots: j1 at 600, j2 at 700 (rewritten), j3 at 800
			// (moved when it comes back), each admitted without a charge.
			check(599, back(599, 1), reserved(ms(1)))
			check(600, back(600, 1), admitted(0))
			check(700, back(700, 2), admitted(0))
			check(790, back(790, 3), reserved(ms(10)))
			check(800, back(800, 3), admitted(0))
			// j4's reservation records the tenant's shift.
			v, err := e.rdb.Get(context.Background(), e.prefix+":{acme}:j:j4").Result()
			if err != nil || !strings.HasSuffix(v, ":500000") {
				t.Fatalf("j4's reservation %q (%v), want one ending in the shift :500000", v, err)
			}
			check(900, back(900, 4), admitted(0))
		})
	}
}

// A reservation stored before SHIFT ('<slot>:<regime>') reads as one made
// at a shift of 0: a rolling upgrade moves it by the whole shift.
func TestShiftReadsTwoFieldReservations(t *testing.T) {
	e := setup(t)
	lim := throttle.PerSecond(10, 1)
	l := newLimiter(t, e.rdb, e.prefix, time.Hour, throttle.Limits{lim})
	c := newEngine(t, l)
	ctx := context.Background()
	if err := e.rdb.Set(ctx, e.prefix+":{acme}:j:old", reservationValue(t0.Add(100*time.Millisecond), throttle.Limits{lim}), time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	if err := e.rdb.Set(ctx, e.prefix+":{acme}:sh", "250000", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	d := decideCopy(t, c, throttle.Copy{Request: throttle.Request{Tenant: "acme", JobID: "old", At: t0.Add(100 * time.Millisecond)}, Incarnation: 2})
	if d.Outcome != throttle.Reserved || d.Wait != 250*time.Millisecond {
		t.Fatalf("a two-field reservation at its slot: %+v, want reserved in 250ms", d)
	}
	if err := e.rdb.Set(ctx, e.prefix+":{acme}:sh", "x", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	_, err := c.Decide(ctx, throttle.Copy{Request: throttle.Request{Tenant: "acme", JobID: "old", At: t0.Add(400 * time.Millisecond)}, Incarnation: 2})
	var inv *throttle.InvalidError
	if !errors.As(err, &inv) || inv.Code != throttle.CodeShift {
		t.Fatalf("a malformed shift: %v, want CodeShift", err)
	}
}

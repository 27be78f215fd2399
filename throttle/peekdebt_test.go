package throttle_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/throttler/throttler/throttle"
)

// Peek shows a settled debt: the tenant's shift, and how many reserved
// jobs it still has to move and by how much at most; the bucket below 0,
// in debt until its empty time. A job back for its slot takes its move
// and leaves the count; one reserved after the debt never enters it.
func TestPeekShowsSettleDebt(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	at := func(n int) time.Time { return t0.Add(ms(n)) }
	l := newLimiter(t, e.rdb, e.prefix, time.Hour, throttle.Limits{throttle.PerSecond(10, 1)})
	c := newEngine(t, l)
	cp := func(id string, inc int64, fresh bool, n int) throttle.Copy {
		return throttle.Copy{Request: throttle.Request{Tenant: "acme", JobID: id, At: at(n)}, Incarnation: inc, Fresh: fresh}
	}
	peek := func(n int) throttle.Snapshot {
		t.Helper()
		before := dumpAll(t, e)
		s, err := l.Peek(ctx, "acme", at(n))
		if err != nil {
			t.Fatalf("Peek at t0+%dms: %v", n, err)
		}
		if after := dumpAll(t, e); !reflect.DeepEqual(before, after) {
			t.Fatalf("Peek wrote:\nbefore %v\nafter  %v", before, after)
		}
		return s
	}
	// j0 runs; j1, j2, j3 hold slots at 100, 200, 300 ms: no debt settled.
	for i := range 4 {
		decideCopy(t, c, cp(fmt.Sprint("j", i), int64(i+1), true, 0))
	}
	if s := peek(10); s.Debt != nil || s.Reserved != 3 {
		t.Fatalf("before any settle: debt %+v, %d reserved; want none and 3", s.Debt, s.Reserved)
	}

	// j0 reports 6 for its 1: 500 ms of debt, which moves all three.
	settle(t, l, throttle.Settlement{Tenant: "acme", JobID: "j0", Charged: 1, Cost: 6, Slot: at(0), At: at(10)})
	s := peek(10)
	if want := (throttle.SettleDebt{Shift: ms(500), Pending: 3, Later: ms(500)}); s.Debt == nil || *s.Debt != want {
		t.Fatalf("after the settle: debt %+v, want %+v", s.Debt, want)
	}
	b := s.Buckets[0]
	if b.Tokens > -7.89 || b.Tokens < -7.91 || !b.ReservedUntil.Equal(at(800)) {
		t.Fatalf("the bucket: %.3f tokens, in debt until %s; want -7.9 and t0+800ms", b.Tokens, b.ReservedUntil.Sub(t0))
	}

	// j1 comes back and is moved (its reservation records the shift); j4,
	// decided now, is reserved behind the debt: neither has to move.
	decideCopy(t, c, cp("j1", 11, false, 100))
	decideCopy(t, c, cp("j4", 5, true, 100))
	if s := peek(100); s.Debt == nil || s.Debt.Pending != 2 || s.Debt.Later != ms(500) || s.Reserved != 4 {
		t.Fatalf("j1 moved, j4 reserved after: debt %+v, %d reserved; want 2 pending 500ms, 4 reserved", s.Debt, s.Reserved)
	}

	// A second debt of 200 ms (j9 reports 3 for its 1): every reservation
	// moves again, those made before the first by both.
	settle(t, l, throttle.Settlement{Tenant: "acme", JobID: "j9", Charged: 1, Cost: 3, Slot: at(100), At: at(100)})
	if want := (throttle.SettleDebt{Shift: ms(700), Pending: 4, Later: ms(700)}); peek(100).Debt == nil || *peek(100).Debt != want {
		t.Fatalf("after a second settle: debt %+v, want %+v", peek(100).Debt, want)
	}

	// A malformed reservation or shift is reported, not read as none.
	if err := e.rdb.Set(ctx, e.prefix+":{acme}:j:bad", "12:x", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	var inv *throttle.InvalidError
	if _, err := l.Peek(ctx, "acme", at(100)); !errors.As(err, &inv) || inv.Code != throttle.CodeReservation {
		t.Fatalf("a malformed reservation: %v, want CodeReservation", err)
	}
	if err := e.rdb.Set(ctx, e.prefix+":{acme}:sh", "-5", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Peek(ctx, "acme", at(100)); !errors.As(err, &inv) || inv.Code != throttle.CodeShift {
		t.Fatalf("a malformed shift: %v, want CodeShift", err)
	}
}

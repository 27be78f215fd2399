package throttle_test

import (
	"context"
	"testing"
	"time"

	"github.com/throttler/throttler/throttle"
)

// TestUnreserveDecidesAJobAnew: a job that holds a slot is admitted on it
// when it comes back, uncharged; once its slot is given up, it is charged
// at its return like a job that never held one (here: the bucket is empty,
// so it gets a new slot), and another job's slot is left alone.
func TestUnreserveDecidesAJobAnew(t *testing.T) {
	e := setup(t)
	l := newLimiter(t, e.rdb, e.prefix, time.Hour, throttle.Limits{throttle.PerSecond(1, 1)})
	c := newEngine(t, l)
	job := func(id string, inc int64, at time.Time) throttle.Copy {
		return throttle.Copy{Request: throttle.Request{Tenant: "acme", JobID: id, Cost: 1, At: at}, Incarnation: inc}
	}
	if d := decideCopy(t, c, job("JOBS:1", 1, t0)); d.Outcome != throttle.Admitted {
		t.Fatalf("the first job: %+v, want admitted", d)
	}
	for _, id := range []string{"JOBS:2", "JOBS:3"} {
		if d := decideCopy(t, c, job(id, 0, t0)); d.Outcome != throttle.Reserved {
			t.Fatalf("job %s: %+v, want a slot reserved", id, d)
		}
	}
	if err := c.Unreserve(context.Background(), []throttle.Slot{{Tenant: "acme", JobID: "JOBS:2"}}); err != nil {
		t.Fatal(err)
	}
	// Back at t0 + 2 s, when both slots (1 s and 2 s) have come: JOBS:3
	// runs on its slot, uncharged; JOBS:2 is charged, and finds the
	// bucket empty.
	at := t0.Add(2 * time.Second)
	if d := decideCopy(t, c, job("JOBS:3", 3, at)); d.Outcome != throttle.Admitted {
		t.Fatalf("JOBS:3 back at its slot: %+v, want admitted on it", d)
	}
	if d := decideCopy(t, c, job("JOBS:2", 2, at)); d.Outcome != throttle.Reserved || d.Wait <= 0 {
		t.Fatalf("JOBS:2 back after giving up its slot: %+v, want charged anew: a new slot", d)
	}
	if err := c.Unreserve(context.Background(), []throttle.Slot{{Tenant: "acme", JobID: "a b"}}); err == nil {
		t.Fatal("Unreserve of a bad job id: no error")
	}
}

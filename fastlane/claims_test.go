package fastlane

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/throttler/throttler/consumer"
	"github.com/throttler/throttler/fastlane/fastcopy"
	"github.com/throttler/throttler/subject"
)

// testClaims is Claims over a fake stream and fake owners, on a fake clock.
type testClaims struct {
	*Claims
	clock  *clock
	stream *fakeStream
	owners *fakeOwners
	stats  *consumer.Stats
}

func newTestClaims(t *testing.T) *testClaims {
	t.Helper()
	clk, stream, owners, stats := newClock(), newFakeStream(), newFakeOwners(), consumer.NewStats(100)
	c, err := NewClaims(ClaimsConfig{Stream: stream, Owners: owners, Subjects: subject.Schedules("sched"),
		Deadline: 2 * time.Second, Stats: stats, Log: discard, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	return &testClaims{Claims: c, clock: clk, stream: stream, owners: owners, stats: stats}
}

// original is b's job stored in JOBS at sequence 7 and published at
// published, delivered to the jobs consumer after a lane claimed it.
func original(published time.Time) (*fakeMsg, consumer.Job) {
	msg := arrivalMsg("jobs.b", 7, published)
	return msg, consumer.Job{ID: "JOBS:7", Tenant: "b", Subject: "jobs.b", Stream: "JOBS", Sequence: 7, Published: published}
}

// TestFastClaimsSettle: an original whose job a lane claimed is acked as a
// duplicate once the copy is stored; handed back for recheck while the
// copy may still be made; and run (its claim given up) once it is older
// than the takeover and the copy is still missing.
func TestFastClaimsSettle(t *testing.T) {
	ctx := context.Background()
	// Deadline 2s: takeover after 3 × 2s + 5s = 11s.
	const takeover = 11 * time.Second
	nakRecheck := "nak+" + recheck.String()
	for _, tc := range []struct {
		name       string
		age        time.Duration // of the original when settled
		stored     bool          // the copy is stored
		lookupErr  error
		releaseErr error
		want       string // how the original is settled
		released   bool
	}{
		{name: "copy stored", age: time.Second, stored: true, want: "ack"},
		{name: "copy stored, original old", age: time.Hour, stored: true, want: "ack"},
		{name: "copy not stored yet", age: time.Second, want: nakRecheck},
		{name: "copy not stored, at the takeover", age: takeover, want: nakRecheck},
		{name: "copy never made", age: takeover + time.Nanosecond, want: "nak", released: true},
		{name: "copy never made, release fails", age: time.Hour, releaseErr: errBoom, want: nakRecheck},
		{name: "looking for the copy fails", age: time.Hour, lookupErr: errBoom, want: nakRecheck},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newTestClaims(t)
			if tc.stored {
				c.stream.copies["sched.f.b.7"] = true
			}
			c.stream.lastErr, c.owners.releaseErr = tc.lookupErr, tc.releaseErr
			msg, job := original(c.clock.Now())
			c.clock.Advance(tc.age)
			c.SettleClaimed(ctx, msg, job)

			if got := msg.settlements(); !slices.Equal(got, []string{tc.want}) {
				t.Errorf("settled %v, want [%s]", got, tc.want)
			}
			if !slices.Equal(c.stream.asked, []string{"sched.f.b.7"}) {
				t.Errorf("looked for copies %v, want [sched.f.b.7]", c.stream.asked)
			}
			wantReleased := []string(nil)
			if tc.released {
				wantReleased = []string{"b JOBS:7 " + strconv.FormatInt(fastcopy.Incarnation(7), 10)}
			}
			if got := c.owners.releases(); !slices.Equal(got, wantReleased) {
				t.Errorf("released %v, want %v", got, wantReleased)
			}
			dups, want := c.stats.Snapshot()["b"].Duplicates, int64(0)
			if tc.stored {
				want = 1
			}
			if dups != want {
				t.Errorf("%d duplicates counted, want %d", dups, want)
			}
		})
	}
}

// TestFastClaimsSettleByTheOriginalsCopy: a job delivered from another
// message than its original (its id names the original's sequence) is
// settled by the copy of the original.
func TestFastClaimsSettleByTheOriginalsCopy(t *testing.T) {
	c := newTestClaims(t)
	c.stream.copies["sched.f.b.7"] = true
	msg, job := original(c.clock.Now())
	job.Sequence = 912
	c.SettleClaimed(context.Background(), msg, job)
	if got := msg.settlements(); !slices.Equal(got, []string{"ack"}) || !slices.Equal(c.stream.asked, []string{"sched.f.b.7"}) {
		t.Fatalf("settled %v after looking for %v, want [ack] after [sched.f.b.7]", got, c.stream.asked)
	}
}

// TestFastNewClaims: NewClaims names each required field missing, and fills
// in the defaults.
func TestFastNewClaims(t *testing.T) {
	_, err := NewClaims(ClaimsConfig{})
	for _, name := range []string{"Stream", "Owners", "Subjects"} {
		if err == nil || !slices.Contains(strings.FieldsFunc(err.Error(), notIdent), name) {
			t.Errorf("NewClaims(ClaimsConfig{}): %v, want an error naming %s", err, name)
		}
	}
	_, err = NewClaims(ClaimsConfig{Stream: newFakeStream(), Owners: newFakeOwners()})
	if err == nil || strings.Contains(err.Error(), "Stream") || !strings.Contains(err.Error(), "Subjects") {
		t.Errorf("NewClaims without Subjects: %v, want an error naming Subjects alone", err)
	}
	c, err := NewClaims(ClaimsConfig{Stream: newFakeStream(), Owners: newFakeOwners(), Subjects: "sched"})
	if err != nil {
		t.Fatal(err)
	}
	if c.cfg.Deadline != 4*time.Second || c.cfg.Stats == nil || c.cfg.Log == nil || c.cfg.Now == nil {
		t.Errorf("defaults: %+v", c.cfg)
	}
	if c.takeover() != 17*time.Second {
		t.Errorf("takeover %v with the default Deadline, want 17s (README)", c.takeover())
	}
}

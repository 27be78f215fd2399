package consumer

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/throttler/throttler/header"
	"github.com/throttler/throttler/tenant"
)

func TestFireAt(t *testing.T) {
	t0 := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	plus0530 := time.FixedZone("+05:30", 5*3600+30*60)
	ms := time.Millisecond
	tests := []struct {
		name string
		now  time.Time
		wait time.Duration
		want time.Time
	}{
		{name: "whole second, no wait", now: t0, wait: 0, want: t0},
		{name: "whole second, whole wait", now: t0, wait: 3 * time.Second, want: t0.Add(3*time.Second + ms)},
		{name: "one ns", now: t0, wait: time.Nanosecond, want: t0.Add(2 * ms)},
		{name: "one µs", now: t0, wait: time.Microsecond, want: t0.Add(2 * ms)},
		{name: "one ns short of a millisecond", now: t0, wait: ms - time.Nanosecond, want: t0.Add(2 * ms)},
		{name: "whole milliseconds", now: t0, wait: 250 * ms, want: t0.Add(251 * ms)},
		{name: "now off the millisecond, no wait", now: t0.Add(time.Nanosecond), wait: 0, want: t0.Add(ms)},
		{name: "sum lands on a millisecond", now: t0.Add(500 * time.Microsecond), wait: 500 * time.Microsecond, want: t0.Add(2 * ms)},
		{name: "sum just past a millisecond", now: t0.Add(500 * time.Microsecond), wait: 500*time.Microsecond + time.Nanosecond,
			want: t0.Add(3 * ms)},
		{name: "long wait", now: t0.Add(250 * ms), wait: 10*time.Minute + 3*time.Microsecond,
			want: t0.Add(10*time.Minute + 252*ms)},
		{name: "other zone, whole millisecond", now: t0.In(plus0530), wait: time.Second, want: t0.Add(time.Second + ms)},
		{name: "other zone, rounds up", now: t0.In(plus0530).Add(time.Microsecond), wait: time.Second,
			want: t0.Add(time.Second + 2*ms)},
		{name: "before the epoch", now: time.Date(1960, 1, 1, 0, 0, 0, 1, time.UTC), wait: 0,
			want: time.Date(1960, 1, 1, 0, 0, 0, int(ms), time.UTC)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := fireAt(tt.now, tt.wait)
			if !got.Equal(tt.want) {
				t.Fatalf("fireAt(%s, %s) = %s, want %s", tt.now, tt.wait, got, tt.want)
			}
			if got.Location() != time.UTC {
				t.Fatalf("fireAt(%s, %s) is in %s, want UTC", tt.now, tt.wait, got.Location())
			}
		})
	}
}

// TestFireAtProperty checks fireAt over many (now, wait) pairs, with fixed
// seeds so a failure can be replayed, plus readings of the real clock (with
// a monotonic part, as the ScheduleDeferrer passes it).
func TestFireAtProperty(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	base := time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC)
	zones := []*time.Location{time.UTC, time.FixedZone("-07:00", -7*3600), time.FixedZone("+05:45", 5*3600+45*60)}
	check := func(now time.Time, wait time.Duration) {
		t.Helper()
		target := now.Add(wait)
		got := fireAt(now, wait)
		if got.Location() != time.UTC {
			t.Fatalf("fireAt(%s, %s) is in %s, want UTC", now, wait, got.Location())
		}
		if got.Before(target) {
			t.Fatalf("fireAt(%s, %s) = %s, before now+wait = %s", now, wait, got, target)
		}
		if d := got.Sub(target); d >= 2*time.Millisecond {
			t.Fatalf("fireAt(%s, %s) = %s, %s after now+wait, want < 2ms", now, wait, got, d)
		}
		if got.Nanosecond()%int(time.Millisecond) != 0 {
			t.Fatalf("fireAt(%s, %s) = %s has a part finer than a millisecond", now, wait, got)
		}
		// The schedule header carries it as RFC3339Nano and the server
		// parses it as RFC 3339: the formatted time must be the same instant.
		back, err := time.Parse(time.RFC3339, got.Format(time.RFC3339Nano))
		if err != nil || !back.Equal(got) {
			t.Fatalf("fireAt(%s, %s) = %s does not survive RFC 3339: %s, %v", now, wait, got, back, err)
		}
	}
	for range 20000 {
		now := base.Add(time.Duration(r.Int64N(int64(365 * 24 * time.Hour)))).In(zones[r.IntN(len(zones))])
		var wait time.Duration
		switch r.IntN(4) {
		case 0:
			wait = 0
		case 1:
			wait = time.Duration(r.Int64N(int64(time.Second))) // sub-second
		case 2:
			wait = time.Duration(r.Int64N(int64(time.Hour))).Truncate(time.Microsecond) // as the throttle rounds it
		default:
			wait = time.Duration(r.Int64N(10)) * time.Second // whole seconds
		}
		check(now, wait)
	}
	for range 1000 {
		check(time.Now(), time.Duration(r.Int64N(int64(10*time.Second))))
	}
}

func TestNakDelay(t *testing.T) {
	tests := []struct {
		wait, want time.Duration
	}{
		{wait: -time.Second, want: 0},
		{wait: -time.Nanosecond, want: 0},
		{wait: 0, want: 0},
		{wait: time.Nanosecond, want: time.Millisecond + time.Nanosecond},
		{wait: time.Microsecond, want: time.Millisecond + time.Microsecond},
		{wait: 250 * time.Millisecond, want: 251 * time.Millisecond},
		{wait: time.Second, want: time.Second + time.Millisecond},
		{wait: 10 * time.Minute, want: 10*time.Minute + time.Millisecond},
	}
	for _, tt := range tests {
		if got := nakDelay(tt.wait); got != tt.want {
			t.Fatalf("nakDelay(%s) = %s, want %s", tt.wait, got, tt.want)
		}
	}
}

// matchErr fails t unless err matches wantErr: nil when wantErr is empty,
// else an error containing wantErr.
func matchErr(t *testing.T, err error, wantErr string) {
	t.Helper()
	switch {
	case wantErr == "" && err != nil:
		t.Fatalf("unexpected error: %v", err)
	case wantErr != "" && err == nil:
		t.Fatalf("got no error, want one containing %q", wantErr)
	case wantErr != "" && !strings.Contains(err.Error(), wantErr):
		t.Fatalf("error %q does not contain %q", err, wantErr)
	}
}

// A job's group is read where Config.Group says; a missing one is no
// group unless it is required, a malformed one is always an error.
func TestReadGroup(t *testing.T) {
	org := tenant.FromHeader("Org")
	tests := []struct {
		name    string
		cfg     Config
		subject string
		header  nats.Header
		want    string
		wantErr string
	}{
		{name: "no source", cfg: Config{}, subject: "jobs.acme", header: nats.Header{"Org": {"a.b"}}},
		{name: "no source, required", cfg: Config{GroupRequired: true}, subject: "jobs.acme"},
		{name: "header", cfg: Config{Group: org}, subject: "jobs.acme", header: nats.Header{"Org": {"org-1"}}, want: "org-1"},
		{name: "token", cfg: Config{Group: tenant.FromSubject(3)}, subject: "jobs.acme.org-2", want: "org-2"},
		{name: "missing", cfg: Config{Group: org}, subject: "jobs.acme"},
		{name: "empty", cfg: Config{Group: org}, subject: "jobs.acme", header: nats.Header{"Org": {""}}},
		{name: "missing token", cfg: Config{Group: tenant.FromSubject(3)}, subject: "jobs.acme"},
		{name: "missing, required", cfg: Config{Group: org, GroupRequired: true}, subject: "jobs.acme",
			wantErr: "missing group: no Org header"},
		{name: "missing token, required", cfg: Config{Group: tenant.FromSubject(3), GroupRequired: true}, subject: "jobs.acme",
			wantErr: "missing group"},
		{name: "malformed", cfg: Config{Group: org}, subject: "jobs.acme", header: nats.Header{"Org": {"org 1"}},
			wantErr: "malformed group"},
		{name: "two headers", cfg: Config{Group: org}, subject: "jobs.acme", header: nats.Header{"Org": {"a", "b"}},
			wantErr: "malformed group: 2 Org headers"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := readGroup(tt.subject, tt.header, tt.cfg)
			matchErr(t, err, tt.wantErr)
			if got != tt.want {
				t.Fatalf("readGroup = %q, want %q", got, tt.want)
			}
		})
	}
}

// A job's group reaches its handler; a job whose group is malformed, or
// missing when Config.GroupRequired, is dead-lettered under its tenant
// with the reason, never decided nor run, as a job with a bad tenant is.
func TestJobGroup(t *testing.T) {
	tests := []struct {
		name     string
		required bool
		msg      func() *fakeMsg
		group    string // the group the handler sees
		reason   string // in Throttler-Reason; "" when the job runs
	}{
		{name: "group", msg: func() *fakeMsg { return newMsg(9, "jobs.acme", "Org", "org-1") }, group: "org-1"},
		{name: "no group", msg: func() *fakeMsg { return newMsg(9, "jobs.acme") }},
		{name: "no group, required", required: true, msg: func() *fakeMsg { return newMsg(9, "jobs.acme", "X-Trace", "t9") },
			reason: "missing group: no Org header"},
		{name: "malformed group", msg: func() *fakeMsg { return newMsg(9, "jobs.acme", "Org", "org.1") }, reason: "malformed group"},
		{name: "two groups", required: true, msg: func() *fakeMsg { return newMsg(9, "jobs.acme", "Org", "a", "Org", "b") },
			reason: "malformed group: 2 Org headers"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := setup(t)
			e.params.Config.Group = tenant.FromHeader("Org")
			e.params.Config.GroupRequired = tt.required
			e.start()
			m := tt.msg()
			e.push(m)
			e.waitSettled(m)
			e.stop()

			dls := e.js.deadLetters()
			if tt.reason == "" {
				wantSettled(t, m, ack)
				if jobs := e.ran.all(); len(dls) != 0 || len(jobs) != 1 || jobs[0].Group != tt.group {
					t.Fatalf("ran %+v with %d dead letters, want the job run with group %q", jobs, len(dls), tt.group)
				}
				return
			}
			if len(dls) != 1 {
				t.Fatalf("%d dead letters, want 1", len(dls))
			}
			wantDeadLetter(t, dls[0], m, "dlq.acme", map[string]string{header.Reason: tt.reason, header.Tenant: "acme", header.Failures: ""})
			wantSettled(t, m, settlement{kind: "term"})
			if got := e.ran.ids(); len(got) != 0 {
				t.Errorf("handler ran %v, want none", got)
			}
			if n := len(e.decider.asked()); n != 0 {
				t.Errorf("decider asked about %d jobs, want none", n)
			}
			if s := e.stats("acme"); s.DeadLettered != 1 {
				t.Errorf("stats of acme %+v, want one dead-lettered", s)
			}
		})
	}
}

func TestPermanent(t *testing.T) {
	base := errors.New("refused")
	if Permanent(nil) != nil {
		t.Error("Permanent(nil) is not nil")
	}
	err := fmt.Errorf("forward: %w", Permanent(base))
	if !IsPermanent(err) || !errors.Is(err, base) || err.Error() != "forward: refused" {
		t.Errorf("wrapped Permanent: IsPermanent %v, Is %v, %q", IsPermanent(err), errors.Is(err, base), err)
	}
	if IsPermanent(base) {
		t.Error("IsPermanent of a plain error")
	}
}

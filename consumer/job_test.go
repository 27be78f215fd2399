package consumer

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/throttler/throttler/throttle"
)

func TestParseCost(t *testing.T) {
	const name = "Job-Cost"
	tests := []struct {
		name    string
		header  nats.Header
		want    int64
		wantErr string
	}{
		{name: "absent", header: nats.Header{"Other": {"5"}}, want: 1},
		{name: "nil headers", header: nil, want: 1},
		{name: "one", header: nats.Header{name: {"1"}}, want: 1},
		{name: "some", header: nats.Header{name: {"42"}}, want: 42},
		{name: "MaxBurst", header: nats.Header{name: {"1000000000"}}, want: throttle.MaxBurst},
		{name: "leading zeros within 10 digits", header: nats.Header{name: {"0000000007"}}, want: 7},
		{name: "empty", header: nats.Header{name: {""}}, wantErr: "malformed cost"},
		{name: "zero", header: nats.Header{name: {"0"}}, wantErr: "malformed cost"},
		{name: "negative", header: nats.Header{name: {"-1"}}, wantErr: "malformed cost"},
		{name: "plus sign", header: nats.Header{name: {"+1"}}, wantErr: "malformed cost"},
		{name: "exponent", header: nats.Header{name: {"1e9"}}, wantErr: "malformed cost"},
		{name: "fraction", header: nats.Header{name: {"1.5"}}, wantErr: "malformed cost"},
		{name: "leading space", header: nats.Header{name: {" 1"}}, wantErr: "malformed cost"},
		{name: "trailing space", header: nats.Header{name: {"1 "}}, wantErr: "malformed cost"},
		{name: "letters", header: nats.Header{name: {"abc"}}, wantErr: "malformed cost"},
		{name: "hex", header: nats.Header{name: {"0x10"}}, wantErr: "malformed cost"},
		{name: "non-ASCII digit", header: nats.Header{name: {"１"}}, wantErr: "malformed cost"},
		{name: "11 digits", header: nats.Header{name: {"10000000000"}}, wantErr: "malformed cost"},
		{name: "11 digits with leading zero", header: nats.Header{name: {"00000000001"}}, wantErr: "malformed cost"},
		{name: "MaxBurst+1", header: nats.Header{name: {"1000000001"}}, wantErr: "malformed cost"},
		{name: "10 nines", header: nats.Header{name: {"9999999999"}}, wantErr: "malformed cost"},
		{name: "overflows int64", header: nats.Header{name: {"99999999999999999999"}}, wantErr: "malformed cost"},
		{name: "two headers", header: nats.Header{name: {"1", "1"}}, wantErr: "2 Job-Cost headers"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseCost(tt.header, name)
			matchErr(t, err, tt.wantErr)
			if got != tt.want {
				t.Fatalf("parseCost = %d, want %d", got, tt.want)
			}
		})
	}
}

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

package throttle_test

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/throttler/throttler/throttle"
)

const day = 24 * time.Hour

func TestParseLimit(t *testing.T) {
	tests := []struct {
		in           string
		defaultBurst int64
		want         throttle.Limit
	}{
		{"100/s", 0, throttle.Limit{Rate: 100, Period: time.Second, Burst: 100}},
		{"6000/m", 0, throttle.Limit{Rate: 6000, Period: time.Minute, Burst: 6000}},
		{"1000/h", 0, throttle.Limit{Rate: 1000, Period: time.Hour, Burst: 1000}},
		{"50000/d", 0, throttle.Limit{Rate: 50000, Period: day, Burst: 50000}},
		{"100/s:200", 0, throttle.Limit{Rate: 100, Period: time.Second, Burst: 200}},
		{"100/s", 7, throttle.Limit{Rate: 100, Period: time.Second, Burst: 7}},
		{"100/s:200", 7, throttle.Limit{Rate: 100, Period: time.Second, Burst: 200}},
		{"5/10s:3", 0, throttle.Limit{Rate: 5, Period: 10 * time.Second, Burst: 3}},
		{" 3/s:4 ", 0, throttle.Limit{Rate: 3, Period: time.Second, Burst: 4}},
	}
	for _, tt := range tests {
		got, err := throttle.ParseLimit(tt.in, tt.defaultBurst)
		if err != nil {
			t.Fatalf("ParseLimit(%q, %d): %v", tt.in, tt.defaultBurst, err)
		}
		if got != tt.want {
			t.Fatalf("ParseLimit(%q, %d) = %+v, want %+v", tt.in, tt.defaultBurst, got, tt.want)
		}
	}
}

func TestParseLimitRejects(t *testing.T) {
	for _, in := range []string{
		"1.5/s", "1e3/s", "-1/s", "+1/s", "0/s", "/s", "100", "100/", "100/x", "100/-1s",
		"100/s:0", "100/s:abc", "100/s:-5", "100/s:1.5", "100/s:", "0x10/s",
		"99999999999999999999/s", "1000000001/s", "100/500us", "100/8785h", "100/1d", "",
	} {
		if l, err := throttle.ParseLimit(in, 0); err == nil {
			t.Fatalf("ParseLimit(%q) = %+v, want an error", in, l)
		}
	}
}

func TestParseLimits(t *testing.T) {
	tests := []struct {
		in   string
		want throttle.Limits
	}{
		{"100/s", throttle.Limits{throttle.PerSecond(100, 100)}},
		{"100/s:200+50000/d", throttle.Limits{throttle.PerSecond(100, 200), throttle.PerDay(50000, 50000)}},
		{"10/s:5+50/m:20+1000/h", throttle.Limits{throttle.PerSecond(10, 5), throttle.PerMinute(50, 20), throttle.PerHour(1000, 1000)}},
		// Equal average rates over different periods are different buckets.
		{"100/s+6000/m", throttle.Limits{throttle.PerSecond(100, 100), throttle.PerMinute(6000, 6000)}},
	}
	for _, tt := range tests {
		got, err := throttle.ParseLimits(tt.in, 0)
		if err != nil {
			t.Fatalf("ParseLimits(%q): %v", tt.in, err)
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Fatalf("ParseLimits(%q) = %v, want %v", tt.in, got, tt.want)
		}
		// String writes what ParseLimits reads back.
		again, err := throttle.ParseLimits(got.String(), 0)
		if err != nil || !reflect.DeepEqual(again, got) {
			t.Fatalf("ParseLimits(%q.String() = %q) = %v, %v; want %v", tt.in, got.String(), again, err, got)
		}
	}
}

func TestParseLimitsRejects(t *testing.T) {
	for _, in := range []string{
		"", " ", "+", "100/s+", "+100/s", "100/s:200+100/s:300", "100/s+100/s",
		"100/s+1.5/m", "1/s+2/s+3/s+4/s+5/s+6/s+7/s+8/s+9/s", "100/s,50/m",
	} {
		if ls, err := throttle.ParseLimits(in, 0); err == nil {
			t.Fatalf("ParseLimits(%q) = %v, want an error", in, ls)
		}
	}
}

func TestParseTenantLimits(t *testing.T) {
	got, err := throttle.ParseTenantLimits("acme=50/s:100+10000/d, globex=5/m", 0)
	if err != nil {
		t.Fatalf("ParseTenantLimits: %v", err)
	}
	want := map[string]throttle.Limits{
		"acme":   {throttle.PerSecond(50, 100), throttle.PerDay(10000, 10000)},
		"globex": {throttle.PerMinute(5, 5)},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("ParseTenantLimits = %v, want %v", got, want)
	}

	got, err = throttle.ParseTenantLimits("", 0)
	if err != nil || len(got) != 0 {
		t.Fatalf("ParseTenantLimits(\"\") = %v, %v; want an empty map", got, err)
	}

	got, err = throttle.ParseTenantLimits("a=3/s", 9)
	if err != nil || !reflect.DeepEqual(got, map[string]throttle.Limits{"a": {throttle.PerSecond(3, 9)}}) {
		t.Fatalf("ParseTenantLimits(a=3/s, 9) = %v, %v; want burst 9", got, err)
	}

	for _, in := range []string{
		"acme", "=5/s", " =5/s", "acme=", "acme=5/s,acme=6/s", "acme=1.5/s", "acme=5/s,", "acme=5/s+5/s",
	} {
		if m, err := throttle.ParseTenantLimits(in, 0); err == nil {
			t.Fatalf("ParseTenantLimits(%q) = %v, want an error", in, m)
		}
	}
}

func TestLimitValidate(t *testing.T) {
	valid := []throttle.Limit{
		throttle.PerSecond(1, 1),
		throttle.PerSecond(throttle.MaxRate, throttle.MaxBurst),
		{Rate: 1, Period: throttle.MinPeriod, Burst: 1},
		{Rate: 1, Period: throttle.MaxPeriod, Burst: 284}, // 284 × 366 days in µs < 2^53
	}
	for _, l := range valid {
		if err := l.Validate(); err != nil {
			t.Fatalf("%+v.Validate() = %v, want nil", l, err)
		}
	}
	invalid := []throttle.Limit{
		{},
		{Rate: 0, Period: time.Second, Burst: 1},
		{Rate: throttle.MaxRate + 1, Period: time.Second, Burst: 1},
		{Rate: 1, Period: time.Second, Burst: 0},
		{Rate: 1, Period: time.Second, Burst: throttle.MaxBurst + 1},
		{Rate: 1, Period: throttle.MinPeriod - time.Microsecond, Burst: 1},
		{Rate: 1, Period: throttle.MaxPeriod + time.Microsecond, Burst: 1},
		{Rate: 1, Period: time.Second + time.Nanosecond, Burst: 1},
		{Rate: 1, Period: throttle.MaxPeriod, Burst: 285}, // 285 × 366 days in µs > 2^53
	}
	for _, l := range invalid {
		if err := l.Validate(); err == nil {
			t.Fatalf("%+v.Validate() = nil, want an error", l)
		}
	}
}

// TestLimitValidateAgreesWithScriptAtExactBoundary checks the one product
// that is exactly 2^53: the script requires burst × period < 2^53, so a
// limit whose product is exactly 2^53 must be refused by Validate too;
// otherwise it passes configuration checks and then every call fails.
func TestLimitValidateAgreesWithScriptAtExactBoundary(t *testing.T) {
	period := (1 << 25) * time.Microsecond // 33.554432s
	atBound := throttle.Limit{Rate: 1, Period: period, Burst: 1 << 28}
	below := throttle.Limit{Rate: 1, Period: period, Burst: 1<<28 - 1}

	e := setup(t)
	l := newLimiter(t, e.rdb, e.prefix, 0, throttle.Limits{throttle.PerSecond(1, 1)})
	ctx := context.Background()
	if _, err := l.Decide(ctx, throttle.Request{Tenant: "a", At: t0, Limits: throttle.Limits{below}}); err != nil {
		t.Fatalf("Decide with burst × period = 2^53 - 2^25: %v", err)
	}
	if err := below.Validate(); err != nil {
		t.Fatalf("%+v.Validate() = %v, want nil", below, err)
	}

	_, decideErr := l.Decide(ctx, throttle.Request{Tenant: "b", At: t0, Limits: throttle.Limits{atBound}})
	validateErr := atBound.Validate()
	var inv *throttle.InvalidError
	if errors.As(decideErr, &inv) && inv.Code != throttle.CodeLimits && validateErr == nil {
		t.Fatalf("burst × period = 2^53: Validate() accepts the limit but the script refuses it: %v "+
			"(limit.go: Validate must reject Burst > (maxExact-1)/periodMicros)", decideErr)
	}
	if validateErr == nil || decideErr == nil {
		t.Fatalf("burst × period = 2^53: Validate() = %v, Decide error = %v; want both to refuse", validateErr, decideErr)
	}
	if !errors.As(decideErr, &inv) || inv.Code != throttle.CodeLimits {
		t.Fatalf("Decide error = %v, want an InvalidError with CodeLimits found before any round trip", decideErr)
	}
}

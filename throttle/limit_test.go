package throttle_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
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

// A duration of 0 or below is refused as such, not as an unknown unit.
func TestParseRejectsDurationNotAbove0(t *testing.T) {
	for _, parse := range []func() error{
		func() error { _, err := throttle.ParseLimit("100/0s", 0); return err },
		func() error { _, err := throttle.ParseLimit("100/-1s", 0); return err },
		func() error { _, err := throttle.ParseSliding("50/0s"); return err },
		func() error { _, err := throttle.ParseSliding("50/-10s"); return err },
	} {
		err := parse()
		if err == nil || !strings.Contains(err.Error(), "want one above 0") || strings.Contains(err.Error(), "unit") {
			t.Errorf("got %v, want a duration not above 0 named as such", err)
		}
	}
}

func TestParsePolicy(t *testing.T) {
	tests := []struct {
		in   string
		want throttle.Policy
	}{
		{"100/s", throttle.Enforce(throttle.PerSecond(100, 100))},
		{"100/s:200+50000/d", throttle.Enforce(throttle.PerSecond(100, 200), throttle.PerDay(50000, 50000))},
		{"10/s:5+50/m:20+1000/h", throttle.Enforce(throttle.PerSecond(10, 5), throttle.PerMinute(50, 20), throttle.PerHour(1000, 1000))},
		// Equal average rates over different periods are different buckets.
		{"100/s+6000/m", throttle.Enforce(throttle.PerSecond(100, 100), throttle.PerMinute(6000, 6000))},
		{"50/s:100+shadow", throttle.Policy{Limits: throttle.Limits{throttle.PerSecond(50, 100)}, Shadow: true}},
		{"shadow + 5/m+10/d", throttle.Policy{Limits: throttle.Limits{throttle.PerMinute(5, 5), throttle.PerDay(10, 10)}, Shadow: true}},
	}
	for _, tt := range tests {
		got, err := throttle.ParsePolicy(tt.in, 0)
		if err != nil {
			t.Fatalf("ParsePolicy(%q): %v", tt.in, err)
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Fatalf("ParsePolicy(%q) = %v, want %v", tt.in, got, tt.want)
		}
		// String writes what ParsePolicy reads back.
		again, err := throttle.ParsePolicy(got.String(), 0)
		if err != nil || !reflect.DeepEqual(again, got) {
			t.Fatalf("ParsePolicy(%q.String() = %q) = %v, %v; want %v", tt.in, got.String(), again, err, got)
		}
	}
}

func TestParsePolicyRejects(t *testing.T) {
	for _, in := range []string{
		"", " ", "+", "100/s+", "+100/s", "100/s:200+100/s:300", "100/s+100/s",
		"100/s+1.5/m", "1/s+2/m+3/h+4/d+5/2s+6/3s+7/4s+8/5s+9/6s", "100/s,50/m",
		// One limit per period: a bucket is named by its period.
		"10/s+100/s:5", "60/m+1/1m0s",
		"shadow", "100/s+shadow+shadow", "100/s+shadows", "100/s+Shadow",
	} {
		if p, err := throttle.ParsePolicy(in, 0); err == nil {
			t.Fatalf("ParsePolicy(%q) = %v, want an error", in, p)
		}
	}
}

func TestParseTenantPolicies(t *testing.T) {
	got, err := throttle.ParseTenantPolicies("acme=50/s:100+10000/d, globex=5/m+shadow", 0)
	if err != nil {
		t.Fatalf("ParseTenantPolicies: %v", err)
	}
	want := map[string]throttle.Policy{
		"acme":   throttle.Enforce(throttle.PerSecond(50, 100), throttle.PerDay(10000, 10000)),
		"globex": {Limits: throttle.Limits{throttle.PerMinute(5, 5)}, Shadow: true},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("ParseTenantPolicies = %v, want %v", got, want)
	}

	got, err = throttle.ParseTenantPolicies("", 0)
	if err != nil || len(got) != 0 {
		t.Fatalf("ParseTenantPolicies(\"\") = %v, %v; want an empty map", got, err)
	}

	got, err = throttle.ParseTenantPolicies("a=3/s", 9)
	if err != nil || !reflect.DeepEqual(got, map[string]throttle.Policy{"a": throttle.Enforce(throttle.PerSecond(3, 9))}) {
		t.Fatalf("ParseTenantPolicies(a=3/s, 9) = %v, %v; want burst 9", got, err)
	}

	for _, in := range []string{
		"acme", "=5/s", " =5/s", "acme=", "acme=5/s,acme=6/s", "acme=1.5/s", "acme=5/s,", "acme=5/s+5/s",
	} {
		if m, err := throttle.ParseTenantPolicies(in, 0); err == nil {
			t.Fatalf("ParseTenantPolicies(%q) = %v, want an error", in, m)
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

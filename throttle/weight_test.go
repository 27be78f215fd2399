package throttle_test

import (
	"strings"
	"testing"

	"github.com/throttler/throttler/throttle"
)

// The weight term parses beside a tenant's other terms and prints back; a
// weight of 1 is the default and is not written.
func TestParsePolicyWeight(t *testing.T) {
	for spec, want := range map[string]struct {
		weight int64
		prints string
	}{
		"50/s:100+weight:3":          {3, "50/s:100+weight:3"},
		" weight:1000 + 10/m+shadow": {1000, "10/m:10+weight:1000+shadow"},
		"running:2+weight:2":         {2, "running:2+weight:2"},
		"10/s:10+weight:1":           {1, "10/s:10"},
		"10/s:10":                    {0, "10/s:10"},
	} {
		p, err := throttle.ParsePolicy(spec, 0)
		if err != nil || p.Weight != want.weight || p.String() != want.prints {
			t.Errorf("ParsePolicy(%q) = %+v (%q), %v; want weight %d printed %q", spec, p, p.String(), err, want.weight, want.prints)
			continue
		}
		if back, err := throttle.ParsePolicy(p.String(), 0); err != nil || back.String() != p.String() {
			t.Errorf("%q prints as %q, which reads back as %+v, %v", spec, p.String(), back, err)
		}
	}
}

// A bad weight is refused with the term named; a weight is no limit.
func TestParsePolicyWeightRefused(t *testing.T) {
	for _, spec := range []string{"10/s+weight:0", "10/s+weight:-1", "10/s+weight:1.5", "10/s+weight:",
		"10/s+weight:2+weight:3", "10/s+weight:1001", "weight:3", "weight:3+shadow"} {
		if _, err := throttle.ParsePolicy(spec, 0); err == nil {
			t.Errorf("ParsePolicy(%q) accepted", spec)
		}
	}
	if _, err := throttle.ParsePolicy("10/s+weight:2+weight:3", 0); err == nil || !strings.Contains(err.Error(), "given twice") {
		t.Errorf("a weight given twice: %v, want it named", err)
	}
}

// Validate holds a weight built in code to the parser's range, and a
// shared level refuses a weight: it is a tenant's share, not a level's.
func TestValidateWeight(t *testing.T) {
	limits := throttle.Limits{throttle.PerSecond(10, 10)}
	for w, ok := range map[int64]bool{0: true, 1: true, throttle.MaxWeight: true, -1: false, throttle.MaxWeight + 1: false} {
		if err := (throttle.Policy{Limits: limits, Weight: w}).Validate(); (err == nil) != ok {
			t.Errorf("Validate of weight %d: %v, want ok=%v", w, err, ok)
		}
	}
	if err := (throttle.Policy{Limits: limits, Weight: 2}).ValidateShared(); err == nil || !strings.Contains(err.Error(), throttle.WeightTerm) {
		t.Errorf("ValidateShared of a weight: %v, want it refused by name", err)
	}
}

package ops

import (
	"testing"
	"time"
)

// TestParseDuration: Go's durations and whole days; anything else, and
// negative durations, are refused with the forms that are taken.
func TestParseDuration(t *testing.T) {
	for s, want := range map[string]time.Duration{"90s": 90 * time.Second, "2h30m": 150 * time.Minute, "7d": 7 * 24 * time.Hour, "0d": 0, "0": 0} {
		if got, err := ParseDuration(s); err != nil || got != want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	for _, s := range []string{"", "7.5d", "-1d", "-1h", "d", "1w", "200000d", "tomorrow"} {
		if got, err := ParseDuration(s); err == nil {
			t.Errorf("ParseDuration(%q) = %v, want an error", s, got)
		}
	}
}

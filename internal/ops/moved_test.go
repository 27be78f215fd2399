package ops

import (
	"testing"

	"github.com/throttler/throttler/header"
	"github.com/throttler/throttler/throttle"
)

// TestStaleUnderPicksTheLimitsGone: after a change to 40/s with a daily
// limit, a copy waiting for 5/s or for an hourly limit is stale; one
// waiting for 40/s or the daily limit was moved under the new limits, and
// one waiting for its slot, a shared limit or a pause is no limit's.
func TestStaleUnderPicksTheLimitsGone(t *testing.T) {
	to, err := throttle.ParsePolicy("40/s:40+10000/d", 0)
	if err != nil {
		t.Fatal(err)
	}
	stale := staleUnder(to)
	for reason, want := range map[string]bool{
		header.WaitLimit + "5/s:5":          true,
		header.WaitLimit + "100/h:100":      true,
		header.WaitLimit + "40/s:40":        false,
		header.WaitLimit + "10000/d:10000":  false,
		header.WaitSlot:                     false,
		"shared limit _global":              false,
		header.WaitPaused + ": maintenance": false,
	} {
		if got := stale(reason); got != want {
			t.Errorf("stale(%q) = %v, want %v", reason, got, want)
		}
	}
}

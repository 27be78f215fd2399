package integration

import (
	"testing"
	"time"
)

// TestOverRate: a level's jobs beyond its rate over any span, at fixed
// times. A bucket's steady pace is never over it; a burst is over by its
// size, wherever it falls; a second burst after a pause too short to
// refill adds to the first.
func TestOverRate(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	// paced is n jobs at rate a second from start s.
	paced := func(s, rate float64, n int) []time.Time {
		var ts []time.Time
		for i := range n {
			ts = append(ts, at(s+float64(i)/rate))
		}
		return ts
	}
	burst := func(s float64, n int) []time.Time {
		var ts []time.Time
		for range n {
			ts = append(ts, at(s))
		}
		return ts
	}
	tests := []struct {
		name   string
		ts     []time.Time
		rate   float64
		over   float64
		second int
	}{
		{"one job", burst(0, 1), 10, 1, 1},
		{"paced at the rate", paced(0, 10, 100), 10, 1, 11},
		{"paced at half the rate", paced(0, 5, 50), 10, 1, 6},
		{"a burst, then paced", append(burst(0, 10), paced(0.1, 10, 50)...), 10, 10, 20},
		{"paced, a burst midway, paced", append(append(paced(0, 10, 50), burst(5.05, 10)...), paced(5.1, 10, 50)...), 10, 10.5, 20},
		{"two bursts 0.5 s apart", append(burst(0, 10), burst(0.5, 10)...), 10, 15, 20},
		{"twice the rate", paced(0, 20, 200), 10, 100.5, 21},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := overRate(tt.ts, tt.rate); got < tt.over-1e-6 || got > tt.over+1e-6 {
				t.Errorf("overRate = %g, want %g", got, tt.over)
			}
			if got := mostWithin(tt.ts, time.Second); got != tt.second {
				t.Errorf("mostWithin 1s = %d, want %d", got, tt.second)
			}
		})
	}
}

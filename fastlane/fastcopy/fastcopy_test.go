package fastcopy

import "testing"

// TestIncarnationsNeverMeet: a fast copy's incarnation is never an ordinary
// message's, and IsCopy tells them apart.
func TestIncarnationsNeverMeet(t *testing.T) {
	for _, seq := range []uint64{1, 17, 1<<52 - 1, 1 << 52, 1<<64 - 1} {
		c, o := Incarnation(seq), Ordinary(seq)
		if !IsCopy(c) || IsCopy(o) {
			t.Errorf("seq %d: IsCopy(%d) = %v, IsCopy(%d) = %v", seq, c, IsCopy(c), o, IsCopy(o))
		}
	}
	if got := Incarnation(17); got != 1<<52+17 {
		t.Errorf("Incarnation(17) = %d, want 2^52+17", got)
	}
	if got := Ordinary(17); got != 17 {
		t.Errorf("Ordinary(17) = %d, want 17", got)
	}
}

package admin

import (
	"strings"
	"testing"
)

// An operation's result logged holds what its pointers point to, as the
// API answers it, not their addresses.
func TestLogJSONFollowsPointers(t *testing.T) {
	type pause struct {
		Reason string `json:"reason"`
	}
	res := struct {
		Was      *pause `json:"was"`
		Released int    `json:"released"`
	}{Was: &pause{Reason: "abuse"}, Released: 8}
	got := logJSON(res)
	if want := `{"was":{"reason":"abuse"},"released":8}`; got != want {
		t.Fatalf("logJSON = %s, want %s", got, want)
	}
	if strings.Contains(logJSON(func() {}), "0x") {
		t.Fatalf("logJSON of a value JSON cannot hold shows an address: %s", logJSON(func() {}))
	}
}

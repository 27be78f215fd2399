package admin

import (
	"errors"
	"net/http"
	"net/http/httptest"
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

// A body with a value of the wrong type is refused in the API's terms:
// the field and the JSON wanted, not the Go types it is read into.
func TestReadJSONNamesTheFieldOfTheWrongType(t *testing.T) {
	var body struct {
		IDs []uint64 `json:"ids"`
		All bool     `json:"all"`
	}
	for in, want := range map[string]string{
		`{"ids":["x"]}`: "field ids: want a whole number, got a JSON string",
		`{"ids":3}`:     "field ids: want a list, got a JSON number",
		`{"all":"yes"}`: "field all: want true or false, got a JSON string",
	} {
		r := httptest.NewRequest(http.MethodPost, "/api/v1/dlq/replay", strings.NewReader(in))
		err := readJSON(r, &body)
		if !errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "Go struct") {
			t.Errorf("%s: %v, want bad input saying %q", in, err, want)
		}
	}
}

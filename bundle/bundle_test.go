package bundle

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/nats-io/nats.go"
)

// bundleCopies is a bundle's worth of copies with what a job can carry:
// several values of one header, no header, empty and binary data.
func bundleCopies() []*nats.Msg {
	return []*nats.Msg{
		{Subject: "sched.acme.1", Header: nats.Header{"Throttler-Job-Id": {"JOBS:1"}, "X-Multi": {"a", "b", ""}, "lower-case": {"kept"}}, Data: []byte("job one")},
		{Subject: "sched.acme.2", Header: nats.Header{}, Data: nil},
		{Subject: "sched.acme.3", Header: nats.Header{"Nats-Schedule": {"@at 2026-01-02T03:04:05Z"}}, Data: []byte{0, 1, 2, 0xff, '\r', '\n'}},
	}
}

func sameCopies(t *testing.T, got, want []*nats.Msg) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d copies, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i].Subject != want[i].Subject || !bytes.Equal(got[i].Data, want[i].Data) ||
			!reflect.DeepEqual(got[i].Header, want[i].Header) {
			t.Errorf("copy %d = %q %v %q, want %q %v %q", i, got[i].Subject, got[i].Header, got[i].Data,
				want[i].Subject, want[i].Header, want[i].Data)
		}
	}
}

func TestBundleRoundTrip(t *testing.T) {
	want := bundleCopies()
	got, err := Copies(Encode(want))
	if err != nil {
		t.Fatalf("Copies: %v", err)
	}
	sameCopies(t, got, want)
}

// TestBundleReadsJSON: bundles stored by earlier versions, as a JSON array,
// are still unpacked after an upgrade.
func TestBundleReadsJSON(t *testing.T) {
	want := bundleCopies()
	type legacy struct {
		Subject string      `json:"subject"`
		Header  nats.Header `json:"header"`
		Data    []byte      `json:"data"`
	}
	var old []legacy
	for _, c := range want {
		old = append(old, legacy{c.Subject, c.Header, c.Data})
	}
	data, err := json.Marshal(old)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Copies(data)
	if err != nil {
		t.Fatalf("Copies: %v", err)
	}
	sameCopies(t, got, want)
}

// TestBundleRefusesDamage: a bundle cut short anywhere, with bytes after
// its end, or of an unknown format is refused, never read as fewer jobs.
func TestBundleRefusesDamage(t *testing.T) {
	data := Encode(bundleCopies())
	for n := range len(data) {
		if got, err := Copies(data[:n]); !errors.Is(err, ErrMalformed) {
			t.Fatalf("cut to %d of %d bytes: %d copies, err %v; want ErrMalformed", n, len(data), len(got), err)
		}
	}
	for what, d := range map[string][]byte{
		"a byte after the end": append(bytes.Clone(data), 0),
		"unknown format":       append([]byte{0x02}, data[1:]...),
		"broken JSON":          []byte(`[{"subject":`),
		"huge count":           {format, 0xff, 0xff, 0xff, 0xff, 0x0f},
	} {
		if _, err := Copies(d); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: err %v, want ErrMalformed", what, err)
		}
	}
}

package header

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/throttle"
)

func TestParseCost(t *testing.T) {
	const name = "Job-Cost"
	tests := []struct {
		name    string
		header  nats.Header
		want    int64
		wantErr string
	}{
		{name: "absent", header: nats.Header{"Other": {"5"}}, want: 1},
		{name: "nil headers", header: nil, want: 1},
		{name: "one", header: nats.Header{name: {"1"}}, want: 1},
		{name: "some", header: nats.Header{name: {"42"}}, want: 42},
		{name: "MaxBurst", header: nats.Header{name: {"1000000000"}}, want: throttle.MaxBurst},
		{name: "leading zeros within 10 digits", header: nats.Header{name: {"0000000007"}}, want: 7},
		{name: "empty", header: nats.Header{name: {""}}, wantErr: "malformed cost"},
		{name: "zero", header: nats.Header{name: {"0"}}, wantErr: "malformed cost"},
		{name: "negative", header: nats.Header{name: {"-1"}}, wantErr: "malformed cost"},
		{name: "plus sign", header: nats.Header{name: {"+1"}}, wantErr: "malformed cost"},
		{name: "exponent", header: nats.Header{name: {"1e9"}}, wantErr: "malformed cost"},
		{name: "fraction", header: nats.Header{name: {"1.5"}}, wantErr: "malformed cost"},
		{name: "leading space", header: nats.Header{name: {" 1"}}, wantErr: "malformed cost"},
		{name: "trailing space", header: nats.Header{name: {"1 "}}, wantErr: "malformed cost"},
		{name: "letters", header: nats.Header{name: {"abc"}}, wantErr: "malformed cost"},
		{name: "hex", header: nats.Header{name: {"0x10"}}, wantErr: "malformed cost"},
		{name: "non-ASCII digit", header: nats.Header{name: {"１"}}, wantErr: "malformed cost"},
		{name: "11 digits", header: nats.Header{name: {"10000000000"}}, wantErr: "malformed cost"},
		{name: "11 digits with leading zero", header: nats.Header{name: {"00000000001"}}, wantErr: "malformed cost"},
		{name: "MaxBurst+1", header: nats.Header{name: {"1000000001"}}, wantErr: "malformed cost"},
		{name: "10 nines", header: nats.Header{name: {"9999999999"}}, wantErr: "malformed cost"},
		{name: "overflows int64", header: nats.Header{name: {"99999999999999999999"}}, wantErr: "malformed cost"},
		{name: "two headers", header: nats.Header{name: {"1", "1"}}, wantErr: "2 Job-Cost headers"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseCost(tt.header, name)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tt.wantErr != "" && err == nil:
				t.Fatalf("got no error, want one containing %q", tt.wantErr)
			case tt.wantErr != "" && !strings.Contains(err.Error(), tt.wantErr):
				t.Fatalf("error %q does not contain %q", err, tt.wantErr)
			}
			if got != tt.want {
				t.Fatalf("ParseCost = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestCopy(t *testing.T) {
	tests := []struct {
		name     string
		dst, src nats.Header
		want     nats.Header
	}{
		{
			name: "drops Nats headers, keeps the rest with every value",
			dst:  nats.Header{},
			src: nats.Header{
				jetstream.MsgIDHeader:           {"orig"},
				jetstream.ExpectedStreamHeader:  {"JOBS"},
				jetstream.ExpectedLastSeqHeader: {"7"},
				jetstream.MsgTTLHeader:          {"1m"},
				jetstream.ScheduleHeader:        {"@at 2025-01-01T00:00:00Z"},
				jetstream.ScheduleTargetHeader:  {"jobs.a"},
				"Job-Cost":                      {"3"},
				"X-Multi":                       {"1", "2", "3"},
				"X-Nats-Lookalike":              {"kept"},
				"Natsy":                         {"kept"},
				JobID:                           {"JOBS:1"},
			},
			want: nats.Header{
				"Job-Cost":         {"3"},
				"X-Multi":          {"1", "2", "3"},
				"X-Nats-Lookalike": {"kept"},
				"Natsy":            {"kept"},
				JobID:              {"JOBS:1"},
			},
		},
		{
			name: "adds to what dst holds",
			dst:  nats.Header{"X-A": {"0"}, "X-B": {"b"}},
			src:  nats.Header{"X-A": {"1", "2"}},
			want: nats.Header{"X-A": {"0", "1", "2"}, "X-B": {"b"}},
		},
		{
			name: "nil src",
			dst:  nats.Header{"X-A": {"0"}},
			src:  nil,
			want: nats.Header{"X-A": {"0"}},
		},
		{
			name: "only Nats headers",
			dst:  nats.Header{},
			src:  nats.Header{jetstream.MsgIDHeader: {"x"}},
			want: nats.Header{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			Copy(tt.dst, tt.src)
			if !reflect.DeepEqual(tt.dst, tt.want) {
				t.Fatalf("copyHeaders: got %v, want %v", tt.dst, tt.want)
			}
		})
	}
}

func TestCopyDoesNotAlias(t *testing.T) {
	src := nats.Header{"X-A": {"1", "2"}}
	dst := nats.Header{}
	Copy(dst, src)
	src["X-A"][0] = "changed"
	src.Add("X-A", "3")
	if want := []string{"1", "2"}; !reflect.DeepEqual(dst["X-A"], want) {
		t.Fatalf("dst changed with src: %v, want %v", dst["X-A"], want)
	}
}

func TestBytes(t *testing.T) {
	for _, tc := range []struct {
		h    nats.Header
		want string // the header block as NATS sends it
	}{
		{nil, ""},
		{nats.Header{"A": {"b"}}, "NATS/1.0\r\nA: b\r\n\r\n"},
		{nats.Header{"Key": {"v1", "v2"}, "Other": {""}}, "NATS/1.0\r\nKey: v1\r\nKey: v2\r\nOther: \r\n\r\n"},
	} {
		if got := Bytes(tc.h); got != len(tc.want) {
			t.Errorf("Bytes(%v) = %d, want %d", tc.h, got, len(tc.want))
		}
	}
}

func TestFits(t *testing.T) {
	small := nats.Header{"A": {"b"}}
	big := nats.Header{"Big": {strings.Repeat("x", maxHeaderBytes)}}
	for _, tc := range []struct {
		name  string
		msg   *nats.Msg
		limit int64
		fits  bool
	}{
		{"small", &nats.Msg{Header: small, Data: []byte("data")}, 1024, true},
		{"exactly the limit", &nats.Msg{Header: small, Data: make([]byte, 1024-Bytes(small))}, 1024, true},
		{"one byte over", &nats.Msg{Header: small, Data: make([]byte, 1025-Bytes(small))}, 1024, false},
		{"headers over 64 KiB", &nats.Msg{Header: big}, 1 << 20, false},
		{"limit unknown", &nats.Msg{Data: make([]byte, 1<<20)}, 0, true},
	} {
		err := Fits(tc.msg, tc.limit)
		if (err == nil) != tc.fits || (err != nil && !TooLarge(err)) {
			t.Errorf("%s: fits = %v, want it to fit: %v", tc.name, err, tc.fits)
		}
	}
}

func TestTooLarge(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nats.ErrMaxPayload, true},
		{fmt.Errorf("forward: %w", nats.ErrMaxPayload), true},
		{&jetstream.APIError{ErrorCode: jsErrHeaderTooLarge}, true},
		{&jetstream.APIError{ErrorCode: jsErrMsgTooLarge}, true},
		{&jetstream.APIError{ErrorCode: 10077}, false},
		{errors.New("timeout"), false},
		{nil, false},
	} {
		if got := TooLarge(tc.err); got != tc.want {
			t.Errorf("TooLarge(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

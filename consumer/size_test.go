package consumer

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestHeaderBytes(t *testing.T) {
	for _, tc := range []struct {
		h    nats.Header
		want string // the header block as NATS sends it
	}{
		{nil, ""},
		{nats.Header{"A": {"b"}}, "NATS/1.0\r\nA: b\r\n\r\n"},
		{nats.Header{"Key": {"v1", "v2"}, "Other": {""}}, "NATS/1.0\r\nKey: v1\r\nKey: v2\r\nOther: \r\n\r\n"},
	} {
		if got := headerBytes(tc.h); got != len(tc.want) {
			t.Errorf("headerBytes(%v) = %d, want %d", tc.h, got, len(tc.want))
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
		{"exactly the limit", &nats.Msg{Header: small, Data: make([]byte, 1024-headerBytes(small))}, 1024, true},
		{"one byte over", &nats.Msg{Header: small, Data: make([]byte, 1025-headerBytes(small))}, 1024, false},
		{"headers over 64 KiB", &nats.Msg{Header: big}, 1 << 20, false},
		{"limit unknown", &nats.Msg{Data: make([]byte, 1<<20)}, 0, true},
	} {
		err := fits(tc.msg, tc.limit)
		if (err == nil) != tc.fits || (err != nil && !tooLarge(err)) {
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
		if got := tooLarge(tc.err); got != tc.want {
			t.Errorf("tooLarge(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

func TestPermanent(t *testing.T) {
	base := errors.New("refused")
	if Permanent(nil) != nil {
		t.Error("Permanent(nil) is not nil")
	}
	err := fmt.Errorf("forward: %w", Permanent(base))
	if !IsPermanent(err) || !errors.Is(err, base) || err.Error() != "forward: refused" {
		t.Errorf("wrapped Permanent: IsPermanent %v, Is %v, %q", IsPermanent(err), errors.Is(err, base), err)
	}
	if IsPermanent(base) {
		t.Error("IsPermanent of a plain error")
	}
}

func TestOneLine(t *testing.T) {
	if got := oneLine("a\r\nb\nc"); got != "a  b c" {
		t.Errorf("oneLine = %q", got)
	}
}

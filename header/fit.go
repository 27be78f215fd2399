package header

import (
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The worker adds headers to everything it publishes for a job (its id,
// subject and tenant; a move's schedule; a dead letter's reason), so a job
// stored within the server's limits can come out over them. These are the
// limits every such message must fit, and the headers it copies.

// maxHeaderBytes is the most header bytes JetStream stores with a message.
const maxHeaderBytes = math.MaxUint16

// Bytes is how many bytes h takes on the wire, as NATS encodes
// headers: "NATS/1.0\r\n", a "Key: value\r\n" line per value, "\r\n".
func Bytes(h nats.Header) int {
	if len(h) == 0 {
		return 0
	}
	n := len("NATS/1.0\r\n") + len("\r\n")
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(": ") + len(v) + len("\r\n")
		}
	}
	return n
}

// Fits reports why msg cannot be published through a connection whose
// server takes at most maxPayload bytes a message, or nil when it can.
func Fits(msg *nats.Msg, maxPayload int64) error {
	hdr := Bytes(msg.Header)
	switch {
	case hdr > maxHeaderBytes:
		return fmt.Errorf("%w: %d bytes of headers, over JetStream's %d", ErrTooLarge, hdr, maxHeaderBytes)
	case maxPayload > 0 && int64(hdr+len(msg.Data)) > maxPayload:
		return fmt.Errorf("%w: %d bytes of data and %d of headers, over the server's max_payload of %d", ErrTooLarge, len(msg.Data), hdr, maxPayload)
	}
	return nil
}

// ErrTooLarge marks a message too large to publish: TooLarge reports it.
var ErrTooLarge = errors.New("message too large")

// The JetStream API error codes of a message too large for a stream.
const (
	jsErrMsgTooLarge    = 10054 // larger than the stream's max_msg_size
	jsErrHeaderTooLarge = 10097 // more than 64 KiB of headers
)

// TooLarge reports whether err says a message was too large to publish:
// for the connection, for JetStream's header limit, or for the stream.
// Publishing it again cannot help.
func TooLarge(err error) bool {
	var apiErr *jetstream.APIError
	switch {
	case errors.Is(err, ErrTooLarge), errors.Is(err, nats.ErrMaxPayload):
		return true
	case errors.As(err, &apiErr):
		return apiErr.ErrorCode == jsErrMsgTooLarge || apiErr.ErrorCode == jsErrHeaderTooLarge
	}
	return false
}

// MaxPayload is the largest message the server of js takes, or 0 when it
// is not known (no connection yet).
func MaxPayload(js jetstream.JetStream) int64 {
	if js == nil || js.Conn() == nil {
		return 0
	}
	return js.Conn().MaxPayload()
}

// Copy copies src into dst, leaving out the headers JetStream acts on when
// publishing (deduplication, expectations, schedules, TTLs), which belong
// to the original publish and not to ours.
func Copy(dst, src nats.Header) {
	for k, vs := range src {
		if strings.HasPrefix(k, "Nats-") {
			continue
		}
		for _, v := range vs {
			dst.Add(k, v)
		}
	}
}

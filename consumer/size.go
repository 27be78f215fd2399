package consumer

import (
	"errors"
	"fmt"
	"math"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The worker adds headers to everything it publishes for a job (its id,
// subject and tenant; a move's schedule; a dead letter's reason), so a job
// stored within the server's limits can come out over them. These are the
// limits every such message must fit, and the headers it copies.

// maxHeaderBytes is the most header bytes JetStream stores with a message.
const maxHeaderBytes = math.MaxUint16

// headerBytes is how many bytes h takes on the wire, as NATS encodes
// headers: "NATS/1.0\r\n", a "Key: value\r\n" line per value, "\r\n".
func headerBytes(h nats.Header) int {
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

// fits reports why msg cannot be published through a connection whose
// server takes at most maxPayload bytes a message, or nil when it can.
func fits(msg *nats.Msg, maxPayload int64) error {
	hdr := headerBytes(msg.Header)
	switch {
	case hdr > maxHeaderBytes:
		return fmt.Errorf("%w: %d bytes of headers, over JetStream's %d", errTooLarge, hdr, maxHeaderBytes)
	case maxPayload > 0 && int64(hdr+len(msg.Data)) > maxPayload:
		return fmt.Errorf("%w: %d bytes of data and %d of headers, over the server's max_payload of %d", errTooLarge, len(msg.Data), hdr, maxPayload)
	}
	return nil
}

// errTooLarge marks a message too large to publish.
var errTooLarge = errors.New("message too large")

// The JetStream API error codes of a message too large for a stream.
const (
	jsErrMsgTooLarge    = 10054 // larger than the stream's max_msg_size
	jsErrHeaderTooLarge = 10097 // more than 64 KiB of headers
)

// tooLarge reports whether err says a message was too large to publish:
// for the connection, for JetStream's header limit, or for the stream.
// Publishing it again cannot help.
func tooLarge(err error) bool {
	var apiErr *jetstream.APIError
	switch {
	case errors.Is(err, errTooLarge), errors.Is(err, nats.ErrMaxPayload):
		return true
	case errors.As(err, &apiErr):
		return apiErr.ErrorCode == jsErrMsgTooLarge || apiErr.ErrorCode == jsErrHeaderTooLarge
	}
	return false
}

// maxPayload is the largest message the server of js takes, or 0 when it
// is not known (no connection yet).
func maxPayload(js jetstream.JetStream) int64 {
	if js == nil || js.Conn() == nil {
		return 0
	}
	return js.Conn().MaxPayload()
}

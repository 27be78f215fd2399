// Package bundle is the wire format of a bundle: the scheduled copies of
// several moved jobs of one tenant carried by one message (header.Bundle),
// which the server stores far faster than a message each. The worker
// writes bundles when it moves a flood off the consumer and unpacks them
// when they fire; the operator's commands (purge, a plan change) read the
// jobs inside the bundles still waiting. It knows bytes and headers only:
// what a copy carries is the mover's business.
package bundle

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
)

// format is the first byte of a bundle's data in the binary layout below.
// Bundles stored before it (JSON, an array: '[') are still read.
const format = 0x01

// ErrMalformed is returned for bundle data that cannot be read: not a
// bundle, damaged, or of a layout this version does not know. Reading it
// again cannot help.
var ErrMalformed = errors.New("malformed bundle")

// Encode lays out copies as one bundle's data: the format byte and the
// number of copies, then for each copy its subject, its header values and
// its data, every number a uvarint and every string prefixed by its
// length:
//
//	format, copies, (subject, values, (key, value)..., data)...
//
// A reader checks the count and that nothing follows, so a bundle cut
// short is refused rather than read as fewer jobs. It is built on the
// path that takes a flooding tenant's jobs off the consumer, so it costs a
// few appends per field where JSON cost ~5 µs per job (maps sorted, data
// in base64).
func Encode(copies []*nats.Msg) []byte {
	size := 0
	for _, c := range copies {
		size += CopySize(c.Subject, c.Header, nil, c.Data)
	}
	out := AppendStart(make([]byte, 0, StartSize+size), len(copies))
	for _, c := range copies {
		out = AppendCopy(out, c.Subject, c.Header, nil, nil, c.Data)
	}
	return out
}

// StartSize bounds the bytes AppendStart appends.
const StartSize = 1 + binary.MaxVarintLen32

// AppendStart appends the start of a bundle of n copies to b: the format
// byte and the count. AppendCopy appends each copy after it.
func AppendStart(b []byte, n int) []byte {
	b = append(b, format)
	return binary.AppendUvarint(b, uint64(n))
}

// AppendCopy appends one copy in Encode's layout: its subject, the values
// of hdr except those of a key that leave reports (none when leave is nil)
// or that own sets, then own's (key, value) pairs, then data. So a mover
// writes a copy's headers from the job's without a map of its own per job.
func AppendCopy(b []byte, subject string, hdr nats.Header, leave func(key string) bool, own [][2]string, data []byte) []byte {
	b = appendString(b, subject)
	kept := func(k string) bool {
		if leave != nil && leave(k) {
			return false
		}
		for _, kv := range own {
			if kv[0] == k {
				return false
			}
		}
		return true
	}
	n := len(own)
	for k, vs := range hdr {
		if kept(k) {
			n += len(vs)
		}
	}
	b = binary.AppendUvarint(b, uint64(n))
	for k, vs := range hdr {
		if !kept(k) {
			continue
		}
		for _, v := range vs {
			b = appendString(b, k)
			b = appendString(b, v)
		}
	}
	for _, kv := range own {
		b = appendString(b, kv[0])
		b = appendString(b, kv[1])
	}
	b = binary.AppendUvarint(b, uint64(len(data)))
	return append(b, data...)
}

// CopySize bounds the bytes AppendCopy appends for the same arguments.
func CopySize(subject string, hdr nats.Header, own [][2]string, data []byte) int {
	size := len(subject) + len(data) + 3*binary.MaxVarintLen32
	for k, vs := range hdr {
		for _, v := range vs {
			size += len(k) + len(v) + 2*binary.MaxVarintLen32
		}
	}
	for _, kv := range own {
		size += len(kv[0]) + len(kv[1]) + 2*binary.MaxVarintLen32
	}
	return size
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// Copies reads the copies a bundle carries, in either format, each ready
// to publish as its own scheduled copy, or an error wrapping ErrMalformed
// when the data cannot be read. Header keys are kept as they were stored.
func Copies(data []byte) ([]*nats.Msg, error) {
	if len(data) > 0 && data[0] == '[' {
		return legacyCopies(data)
	}
	if len(data) == 0 || data[0] != format {
		return nil, fmt.Errorf("%w: unknown format", ErrMalformed)
	}
	r := reader{b: data[1:]}
	count := r.uvarint()
	if count > uint64(len(r.b)) { // each copy takes at least three bytes
		return nil, fmt.Errorf("%w: %d copies in %d bytes", ErrMalformed, count, len(r.b))
	}
	out := make([]*nats.Msg, 0, count)
	for range count {
		m := &nats.Msg{Subject: string(r.bytes())}
		n := r.uvarint()
		if n > uint64(len(r.b)) { // each value takes at least two bytes
			return nil, fmt.Errorf("%w: %d header values in %d bytes", ErrMalformed, n, len(r.b))
		}
		m.Header = make(nats.Header, n)
		for range n {
			k, v := string(r.bytes()), string(r.bytes())
			m.Header[k] = append(m.Header[k], v)
		}
		if d := r.bytes(); len(d) > 0 {
			m.Data = append([]byte(nil), d...)
		}
		if r.err != nil {
			return nil, r.err
		}
		out = append(out, m)
	}
	if r.err == nil && len(r.b) > 0 {
		r.err = fmt.Errorf("%w: %d bytes after the last copy", ErrMalformed, len(r.b))
	}
	if r.err != nil {
		return nil, r.err
	}
	return out, nil
}

// legacyCopies reads a bundle of the JSON format earlier versions stored.
func legacyCopies(data []byte) ([]*nats.Msg, error) {
	var legacy []struct {
		Subject string      `json:"subject"`
		Header  nats.Header `json:"header"`
		Data    []byte      `json:"data"`
	}
	if err := json.Unmarshal(data, &legacy); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	out := make([]*nats.Msg, len(legacy))
	for i, c := range legacy {
		out[i] = &nats.Msg{Subject: c.Subject, Header: c.Header, Data: c.Data}
	}
	return out, nil
}

// reader reads uvarint-prefixed fields; the first failure sticks.
type reader struct {
	b   []byte
	err error
}

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = fmt.Errorf("%w: bad length", ErrMalformed)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) bytes() []byte {
	n := r.uvarint()
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)) {
		r.err = fmt.Errorf("%w: field of %d bytes past the end", ErrMalformed, n)
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

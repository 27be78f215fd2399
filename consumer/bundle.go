package consumer

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/throttler/throttler/fastlane/fastcopy"
	"github.com/throttler/throttler/header"
)

// bundleFormat is the first byte of a bundle's data in the binary format
// below. Bundles stored before it (JSON, an array: '[') are still read.
const bundleFormat = 0x01

// errBadBundle is returned for bundle data that cannot be read: not a
// bundle, damaged, or of a layout this version does not know. Unpacking it
// again cannot help.
var errBadBundle = errors.New("malformed bundle")

// encodeBundle lays out the scheduled copies a bundle carries: the format
// byte and the number of copies, then for each copy its subject, its header
// values and its data, every number a uvarint and every string prefixed by
// its length:
//
//	format, copies, (subject, values, (key, value)..., data)...
//
// A reader checks the count and that nothing follows, so a bundle cut
// short is refused rather than read as fewer jobs.
// It is built on the path that takes a flooding tenant's jobs off the
// consumer, so it costs a few appends per field where JSON cost ~5 µs per
// job (maps sorted, data in base64).
func encodeBundle(copies []*nats.Msg) []byte {
	size := 0
	for _, c := range copies {
		size += copySize(c.Subject, c.Header, nil, c.Data)
	}
	out := appendBundleStart(make([]byte, 0, size+1+binary.MaxVarintLen32), len(copies))
	for _, c := range copies {
		out = appendCopy(out, c.Subject, c.Header, false, nil, c.Data)
	}
	return out
}

// appendBundleStart appends the format byte and the number of copies.
func appendBundleStart(b []byte, copies int) []byte {
	b = append(b, bundleFormat)
	return binary.AppendUvarint(b, uint64(copies))
}

// appendCopy appends one copy in encodeBundle's layout: its subject, the
// values of hdr, then own (key, value) pairs, then data. With asCopy, the
// values of hdr that a scheduled copy does not carry are left out (see
// copyOf): headers JetStream acts on (Nats-*) and those own replaces.
func appendCopy(b []byte, subject string, hdr nats.Header, asCopy bool, own [][2]string, data []byte) []byte {
	b = appendString(b, subject)
	n := len(own)
	for k, vs := range hdr {
		if !asCopy || !replacedInCopy(k, own) {
			n += len(vs)
		}
	}
	b = binary.AppendUvarint(b, uint64(n))
	for k, vs := range hdr {
		if asCopy && replacedInCopy(k, own) {
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

// replacedInCopy reports whether a scheduled copy leaves out the source's
// header k: a header JetStream acts on, the fast copy's or woken job's
// mark (a moved copy is a copy of its own, with an incarnation of its own,
// back on the job's subject), or one the copy sets itself.
func replacedInCopy(k string, own [][2]string) bool {
	if strings.HasPrefix(k, "Nats-") || k == fastcopy.Header || k == header.Woken {
		return true
	}
	for _, kv := range own {
		if kv[0] == k {
			return true
		}
	}
	return false
}

// copySize bounds the bytes appendCopy appends.
func copySize(subject string, hdr nats.Header, own [][2]string, data []byte) int {
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

// BundleCopies reads the scheduled copies a bundle of moved jobs carries
// (a message with header.Bundle), in either format, each ready to publish
// as its own scheduled copy, or an error when the data cannot be read.
func BundleCopies(data []byte) ([]*nats.Msg, error) { return decodeBundle(data) }

// decodeBundle reads the copies of a bundle, in either format. Header keys
// are kept as they were stored.
func decodeBundle(data []byte) ([]*nats.Msg, error) {
	if len(data) > 0 && data[0] == '[' {
		var legacy []struct {
			Subject string      `json:"subject"`
			Header  nats.Header `json:"header"`
			Data    []byte      `json:"data"`
		}
		if err := json.Unmarshal(data, &legacy); err != nil {
			return nil, fmt.Errorf("%w: %w", errBadBundle, err)
		}
		out := make([]*nats.Msg, len(legacy))
		for i, c := range legacy {
			out[i] = &nats.Msg{Subject: c.Subject, Header: c.Header, Data: c.Data}
		}
		return out, nil
	}
	if len(data) == 0 || data[0] != bundleFormat {
		return nil, fmt.Errorf("%w: unknown format", errBadBundle)
	}
	r := bundleReader{b: data[1:]}
	count := r.uvarint()
	if count > uint64(len(r.b)) { // each copy takes at least three bytes
		return nil, fmt.Errorf("%w: %d copies in %d bytes", errBadBundle, count, len(r.b))
	}
	out := make([]*nats.Msg, 0, count)
	for range count {
		m := &nats.Msg{Subject: string(r.bytes())}
		n := r.uvarint()
		if n > uint64(len(r.b)) { // each value takes at least two bytes
			return nil, fmt.Errorf("%w: %d header values in %d bytes", errBadBundle, n, len(r.b))
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
		r.err = fmt.Errorf("%w: %d bytes after the last copy", errBadBundle, len(r.b))
	}
	if r.err != nil {
		return nil, r.err
	}
	return out, nil
}

// bundleReader reads uvarint-prefixed fields; the first failure sticks.
type bundleReader struct {
	b   []byte
	err error
}

func (r *bundleReader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = fmt.Errorf("%w: bad length", errBadBundle)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *bundleReader) bytes() []byte {
	n := r.uvarint()
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)) {
		r.err = fmt.Errorf("%w: field of %d bytes past the end", errBadBundle, n)
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

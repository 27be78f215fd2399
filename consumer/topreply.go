package consumer

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// topMagic starts every reply to a top request, with its format version.
const topMagic = "throttler-top 1"

// topChunk caps the bytes of one reply message, well under NATS' default
// 1 MB payload limit.
const topChunk = 256 << 10

// topReporter answers throttler top with what the worker knows of each
// tenant (waiting), told by the stages as jobs pass them.
type topReporter struct {
	waiting *waiting
	pauses  *pauseGate // the worker's, for the tenants paused
	js      jetstream.JetStream
	subject string // Config.TopSubject, "" for none
	now     func() time.Time
	log     *slog.Logger
}

// listen answers the requests of `throttler top` on
// Config.TopSubject until the returned stop is called: each is answered
// with this worker's rows (TopRows), in as many messages as they need.
func (r *topReporter) listen() (stop func()) {
	nc := r.js.Conn()
	if r.subject == "" || nc == nil {
		return func() {}
	}
	id := strings.TrimPrefix(nats.NewInbox(), "_INBOX.")
	sub, err := nc.Subscribe(r.subject, func(m *nats.Msg) {
		if m.Reply == "" {
			return
		}
		var failed error
		r.encode(id, func(chunk []byte) {
			if failed == nil {
				failed = nc.Publish(m.Reply, chunk) // copies chunk
			}
		})
		if failed != nil {
			r.log.Debug("answering throttler top failed", "err", failed)
		}
	})
	if err != nil {
		r.log.Warn("listening for throttler top failed; this worker is missing from it", "err", err)
		return func() {}
	}
	return func() { _ = sub.Unsubscribe() }
}

// encode encodes this worker's rows as the messages of its reply,
// without building them first, and hands each to emit as it is cut (see
// EncodeTopRows); emit must not keep it.
func (r *topReporter) encode(id string, emit func([]byte)) {
	e := newTopEncoder(id, emit)
	now := r.now()
	r.waiting.visit(now, r.pauses.pausedAt(now), e.add)
	e.finish()
}

// TopRows returns this worker's view of every tenant it knows something
// of now: its rates, the jobs it sent to wait that are not back yet, its
// dead letters in the last hour.
func (w *Worker) TopRows() []TopRow { return w.top.rows() }

// rows returns the worker's rows now, as TopRows.
func (r *topReporter) rows() []TopRow {
	now := r.now()
	return r.waiting.rows(now, r.pauses.pausedAt(now))
}

// EncodeTopRows writes rows as the messages of one worker's reply (id
// names the worker): each starts with a line "throttler-top 1 ID K N",
// the K-th message, N being 0 but in the last, where it is K; then a line
// per row of tab-separated fields (rates in thousandths per second, the
// oldest wait in milliseconds).
func EncodeTopRows(id string, rows []TopRow) [][]byte {
	var chunks [][]byte
	e := newTopEncoder(id, func(c []byte) { chunks = append(chunks, bytes.Clone(c)) })
	for i := range rows {
		e.add(&rows[i])
	}
	e.finish()
	return chunks
}

// topEncoder cuts a reply into messages as rows are added, handing each
// to emit, in one buffer used again for the next.
type topEncoder struct {
	head string
	emit func([]byte)
	buf  []byte
	part int
}

func newTopEncoder(id string, emit func([]byte)) *topEncoder {
	e := &topEncoder{head: topMagic + " " + id + " ", emit: emit, buf: make([]byte, 0, topChunk+4096)}
	e.start()
	return e
}

// start begins the next message.
func (e *topEncoder) start() {
	e.part++
	e.buf = append(e.buf[:0], e.head...)
	e.buf = strconv.AppendInt(e.buf, int64(e.part), 10)
	e.buf = append(e.buf, " 0\n"...)
}

// add appends one row.
func (e *topEncoder) add(r *TopRow) {
	if len(e.buf) >= topChunk {
		e.emit(e.buf)
		e.start()
	}
	e.buf = appendTopRow(e.buf, r)
}

// finish emits the last message, marked as such.
func (e *topEncoder) finish() {
	line := bytes.IndexByte(e.buf, '\n')
	rows := e.buf[line:]
	last := append([]byte(e.head), strconv.Itoa(e.part)+" "+strconv.Itoa(e.part)...)
	e.emit(append(last, rows...))
}

// appendTopRow appends r as one line.
func appendTopRow(b []byte, r *TopRow) []byte {
	b = append(b, r.Tenant...)
	for _, n := range [...]int64{int64(r.Admitted*1000 + 0.5), int64(r.Deferred*1000 + 0.5), r.Naked, r.Moved, r.Parked, r.Paused,
		int64(r.OldestWait*1000 + 0.5), r.DeadLetters} {
		b = append(b, '\t')
		b = strconv.AppendInt(b, n, 10)
	}
	b = append(b, '\t')
	for i := 0; i < len(r.Binding); i++ {
		c := r.Binding[i]
		if c == '\t' || c == '\n' || c == '\r' {
			c = ' '
		}
		b = append(b, c)
	}
	return append(b, '\n')
}

// TopReply is one message of a worker's reply, read back.
type TopReply struct {
	// Worker names the worker; Part is this message's number, from 1.
	// Parts is 0 but in the last message, where it is how many there are.
	Worker      string
	Part, Parts int
	Rows        []TopRow
}

// DecodeTopReply reads one message of a worker's reply.
func DecodeTopReply(data []byte) (TopReply, error) {
	var r TopReply
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), topChunk*2)
	if !sc.Scan() {
		return r, errors.New("empty top reply")
	}
	rest, ok := strings.CutPrefix(sc.Text(), topMagic+" ")
	if !ok {
		return r, fmt.Errorf("not a top reply: %q", sc.Text())
	}
	if _, err := fmt.Sscanf(rest, "%s %d %d", &r.Worker, &r.Part, &r.Parts); err != nil || r.Part < 1 || (r.Parts != 0 && r.Parts != r.Part) {
		return r, fmt.Errorf("bad top reply header %q", sc.Text())
	}
	held := map[string]string{} // the few reasons, shared by the rows
	for sc.Scan() {
		row, err := parseTopRow(sc.Bytes(), held)
		if err != nil {
			return r, err
		}
		r.Rows = append(r.Rows, row)
	}
	return r, sc.Err()
}

// parseTopRow reads one row's line; held interns the reasons.
func parseTopRow(line []byte, held map[string]string) (TopRow, error) {
	var f [10][]byte
	rest := line
	for i := range 9 {
		j := bytes.IndexByte(rest, '\t')
		if j < 0 {
			return TopRow{}, fmt.Errorf("bad top row %q", line)
		}
		f[i], rest = rest[:j], rest[j+1:]
	}
	f[9] = rest
	var n [8]int64
	for i := range n {
		v, err := strconv.ParseInt(string(f[i+1]), 10, 64)
		if err != nil {
			return TopRow{}, fmt.Errorf("bad top row %q: %w", line, err)
		}
		n[i] = v
	}
	h, ok := held[string(f[9])]
	if !ok {
		h = string(f[9])
		held[h] = h
	}
	return TopRow{Tenant: string(f[0]), Admitted: float64(n[0]) / 1000, Deferred: float64(n[1]) / 1000,
		Naked: n[2], Moved: n[3], Parked: n[4], Paused: n[5], OldestWait: float64(n[6]) / 1000, DeadLetters: n[7], Binding: h}, nil
}

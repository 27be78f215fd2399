package consumer

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// topMagic starts every reply to a top request, with its format version.
const topMagic = "throttler-top 1"

// topChunk caps the bytes of one reply message, well under NATS' default
// 1 MB payload limit.
const topChunk = 256 << 10

// listenForTop answers the requests of `throttler top` on
// Config.TopSubject until the returned stop is called: each is answered
// with this worker's rows (TopRows), in as many messages as they need.
func (w *Worker) listenForTop() (stop func()) {
	nc := w.js.Conn()
	if w.cfg.TopSubject == "" || nc == nil {
		return func() {}
	}
	id := strings.TrimPrefix(nats.NewInbox(), "_INBOX.")
	sub, err := nc.Subscribe(w.cfg.TopSubject, func(m *nats.Msg) {
		if m.Reply == "" {
			return
		}
		for _, chunk := range w.encodeTop(id) {
			if err := nc.Publish(m.Reply, chunk); err != nil {
				w.log.Debug("answering throttler top failed", "err", err)
				return
			}
		}
	})
	if err != nil {
		w.log.Warn("listening for throttler top failed; this worker is missing from it", "err", err)
		return func() {}
	}
	return func() { _ = sub.Unsubscribe() }
}

// encodeTop encodes this worker's rows as the messages of its reply,
// without building them first (see EncodeTopRows).
func (w *Worker) encodeTop(id string) [][]byte {
	e := newTopEncoder(id)
	now := w.cfg.Now()
	w.waiting.visit(now, w.pausedAt(now), e.add)
	return e.finish()
}

// pausedAt is a question of whether a tenant is paused at now, or nil
// without a Pauser.
func (w *Worker) pausedAt(now time.Time) func(string) bool {
	if w.pauses == nil {
		return nil
	}
	return func(t string) bool { _, _, p := w.pauses.Paused(t, now); return p }
}

// TopRows returns this worker's view of every tenant it knows something
// of now: its rates, the jobs it sent to wait that are not back yet, its
// dead letters in the last hour.
func (w *Worker) TopRows() []TopRow {
	now := w.cfg.Now()
	return w.waiting.rows(now, w.pausedAt(now))
}

// EncodeTopRows writes rows as the messages of one worker's reply (id
// names the worker): each starts with a line "throttler-top 1 ID K N" (the
// K-th of N messages), then a line per row of tab-separated fields (rates
// in thousandths per second, the oldest wait in milliseconds).
func EncodeTopRows(id string, rows []TopRow) [][]byte {
	e := newTopEncoder(id)
	for i := range rows {
		e.add(&rows[i])
	}
	return e.finish()
}

// topEncoder cuts a reply into messages as rows are added.
type topEncoder struct {
	prefix string
	chunks [][]byte
	buf    []byte
}

// topRoom is the room kept in each message's first line for "K N": the
// numbers are written once every message is cut.
const topRoom = 2*6 + 2

func newTopEncoder(id string) *topEncoder {
	e := &topEncoder{prefix: topMagic + " " + id + " "}
	e.cut()
	return e
}

// cut starts a new message.
func (e *topEncoder) cut() {
	if e.buf != nil {
		e.chunks = append(e.chunks, e.buf)
	}
	e.buf = make([]byte, len(e.prefix)+topRoom, topChunk+4096)
	copy(e.buf, e.prefix)
}

// add appends one row.
func (e *topEncoder) add(r *TopRow) {
	if len(e.buf) >= topChunk {
		e.cut()
	}
	e.buf = appendTopRow(e.buf, r)
}

// finish writes each message's numbers and returns the messages.
func (e *topEncoder) finish() [][]byte {
	e.cut()
	e.buf = nil
	for k, c := range e.chunks {
		head := c[len(e.prefix) : len(e.prefix)+topRoom]
		n := copy(head, fmt.Sprintf("%d %d", k+1, len(e.chunks)))
		for j := n; j < topRoom-1; j++ {
			head[j] = ' ' // read as spaces before the line's end
		}
		head[topRoom-1] = '\n'
	}
	return e.chunks
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
	for i := 0; i < len(r.HeldBy); i++ {
		c := r.HeldBy[i]
		if c == '\t' || c == '\n' || c == '\r' {
			c = ' '
		}
		b = append(b, c)
	}
	return append(b, '\n')
}

// TopReply is one message of a worker's reply, read back.
type TopReply struct {
	// Worker names the worker; Part is this message's number, from 1, of
	// Parts.
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
	if _, err := fmt.Sscanf(strings.TrimRight(rest, " "), "%s %d %d", &r.Worker, &r.Part, &r.Parts); err != nil || r.Part < 1 || r.Part > r.Parts {
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
		Naked: n[2], Moved: n[3], Parked: n[4], Paused: n[5], OldestWait: float64(n[6]) / 1000, DeadLetters: n[7], HeldBy: h}, nil
}

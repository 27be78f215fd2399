package consumer

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"

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
		for _, chunk := range EncodeTopRows(id, w.TopRows()) {
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

// TopRows returns this worker's view of every tenant it knows something
// of now: its rates, the jobs it sent to wait that are not back yet, its
// dead letters in the last hour.
func (w *Worker) TopRows() []TopRow {
	now := w.cfg.Now()
	var paused func(string) bool
	if w.pauses != nil {
		paused = func(t string) bool { _, _, p := w.pauses.Paused(t, now); return p }
	}
	return w.waiting.rows(now, paused)
}

// EncodeTopRows writes rows as the messages of one worker's reply (id
// names the worker): each starts with a line "throttler-top 1 ID K N" (the
// K-th of N messages), then a line per row of tab-separated fields.
func EncodeTopRows(id string, rows []TopRow) [][]byte {
	// The header's numbers are written once every chunk is cut: the room
	// they take is kept at the start of each (parts are at most 6 digits).
	const room = 2*6 + 2
	prefix := topMagic + " " + id + " "
	var chunks [][]byte
	for i := 0; i < len(rows) || len(chunks) == 0; {
		buf := make([]byte, len(prefix)+room, topChunk+4096)
		copy(buf, prefix)
		for ; i < len(rows) && len(buf) < topChunk; i++ {
			buf = appendTopRow(buf, rows[i])
		}
		chunks = append(chunks, buf)
	}
	for k, c := range chunks {
		nums := fmt.Sprintf("%d %d", k+1, len(chunks))
		head := c[len(prefix) : len(prefix)+room]
		n := copy(head, nums)
		for j := n; j < room-1; j++ {
			head[j] = ' ' // read as spaces before the line's end
		}
		head[room-1] = '\n'
	}
	return chunks
}

// appendTopRow appends r as one line.
func appendTopRow(b []byte, r TopRow) []byte {
	b = append(b, r.Tenant...)
	for _, f := range []float64{r.Admitted, r.Deferred} {
		b = append(b, '\t')
		b = strconv.AppendFloat(b, f, 'f', -1, 64)
	}
	for _, n := range []int64{r.Naked, r.Moved, r.Parked, r.Paused} {
		b = append(b, '\t')
		b = strconv.AppendInt(b, n, 10)
	}
	b = append(b, '\t')
	b = strconv.AppendFloat(b, r.OldestWait, 'f', 3, 64)
	b = append(b, '\t')
	b = strconv.AppendInt(b, r.DeadLetters, 10)
	b = append(b, '\t')
	b = append(b, strings.Map(func(c rune) rune {
		if c == '\t' || c == '\n' || c == '\r' {
			return ' '
		}
		return c
	}, r.HeldBy)...)
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
	for sc.Scan() {
		f := strings.SplitN(sc.Text(), "\t", 10)
		if len(f) != 10 {
			return r, fmt.Errorf("bad top row %q", sc.Text())
		}
		row := TopRow{Tenant: f[0], HeldBy: f[9]}
		var errs []error
		pf := func(s string) float64 { v, err := strconv.ParseFloat(s, 64); errs = append(errs, err); return v }
		pi := func(s string) int64 { v, err := strconv.ParseInt(s, 10, 64); errs = append(errs, err); return v }
		row.Admitted, row.Deferred = pf(f[1]), pf(f[2])
		row.Naked, row.Moved, row.Parked, row.Paused = pi(f[3]), pi(f[4]), pi(f[5]), pi(f[6])
		row.OldestWait, row.DeadLetters = pf(f[7]), pi(f[8])
		if err := errors.Join(errs...); err != nil {
			return r, fmt.Errorf("bad top row %q: %w", sc.Text(), err)
		}
		r.Rows = append(r.Rows, row)
	}
	return r, sc.Err()
}

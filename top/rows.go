package top

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The rows workers answer a top request with, and their encoding: one
// format, written by the workers (package consumer) and read by Gather.

// replyMagic starts every reply to a top request, with its format version.
const replyMagic = "throttler-top 1"

// replyChunk caps the bytes of one reply message, well under NATS'
// default 1 MB payload limit.
const replyChunk = 256 << 10

// Row is one tenant's line of `throttler top`, as one worker knows it
// (the rows of every worker add up to the fleet's).
type Row struct {
	Tenant string `json:"tenant"`
	// Admitted and Deferred are jobs per second, over the last 5 s.
	Admitted float64 `json:"admitted_per_s"`
	Deferred float64 `json:"deferred_per_s"`
	// Waiting counts the jobs waiting, by how: NAK'd on the consumer,
	// moved off it for a slot, parked for a lease, paused.
	Naked  int64 `json:"nakd"`
	Moved  int64 `json:"moved"`
	Parked int64 `json:"parked"`
	Paused int64 `json:"paused"`
	// OldestWait is how long the oldest of them has waited since it was
	// first published, in seconds.
	OldestWait float64 `json:"oldest_wait_s"`
	// Binding is why the last of its jobs deferred waited: a limit, a cap,
	// a pause, a downstream's hold.
	Binding string `json:"held_by,omitempty"`
	// DeadLetters counts its jobs dead-lettered in the last hour.
	DeadLetters int64 `json:"dead_letters_1h"`
	// Runs, in a worker's row, are its parked jobs of Parked run by run,
	// and UnparkedWait the oldest wait (in seconds) of its other jobs
	// waiting: a parked job woken early comes back to any worker, which
	// counts it off (a run of N < 0), so only the fleet's runs together
	// say which parked jobs still wait, and Gather nets them to find the
	// oldest. Nil in a row without parked jobs (then OldestWait is its
	// other jobs'); not in JSON.
	Runs         []ParkedRun `json:"-"`
	UnparkedWait float64     `json:"-"`
}

// ParkedRun is a run of a tenant's jobs one worker parked for a lease or
// a turn (N > 0), the oldest of them waiting Wait so far; or of parked
// jobs woken early that came back to it (N < 0).
type ParkedRun struct {
	N    int64
	Wait time.Duration
}

// Waiting is the row's jobs waiting, of every kind.
func (r Row) Waiting() int64 { return r.Naked + r.Moved + r.Parked + r.Paused }

// EncodeRows writes rows as the messages of one worker's reply (id
// names the worker): each starts with a line "throttler-top 1 ID K N",
// the K-th message, N being 0 but in the last, where it is K; then a line
// per row of tab-separated fields (rates in thousandths per second, the
// oldest wait in milliseconds).
func EncodeRows(id string, rows []Row) [][]byte {
	var chunks [][]byte
	e := NewEncoder(id, func(c []byte) { chunks = append(chunks, bytes.Clone(c)) })
	for i := range rows {
		e.Add(&rows[i])
	}
	e.Finish()
	return chunks
}

// Encoder cuts a reply into messages as rows are added, handing each to
// emit, in one buffer used again for the next: a worker encodes its rows
// as it visits them, without building them first.
type Encoder struct {
	head string
	emit func([]byte)
	buf  []byte
	part int
}

// NewEncoder starts the reply of the worker named id; emit must not keep
// the messages it is handed.
func NewEncoder(id string, emit func([]byte)) *Encoder {
	e := &Encoder{head: replyMagic + " " + id + " ", emit: emit, buf: make([]byte, 0, replyChunk+4096)}
	e.start()
	return e
}

// start begins the next message.
func (e *Encoder) start() {
	e.part++
	e.buf = append(e.buf[:0], e.head...)
	e.buf = strconv.AppendInt(e.buf, int64(e.part), 10)
	e.buf = append(e.buf, " 0\n"...)
}

// Add appends one row.
func (e *Encoder) Add(r *Row) {
	if len(e.buf) >= replyChunk {
		e.emit(e.buf)
		e.start()
	}
	e.buf = appendRow(e.buf, r)
}

// Finish emits the last message, marked as such.
func (e *Encoder) Finish() {
	line := bytes.IndexByte(e.buf, '\n')
	rows := e.buf[line:]
	last := append([]byte(e.head), strconv.Itoa(e.part)+" "+strconv.Itoa(e.part)...)
	e.emit(append(last, rows...))
}

// appendRow appends r as one line.
func appendRow(b []byte, r *Row) []byte {
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
	if r.Runs != nil {
		// After the binding, which holds no tab: the oldest wait of the
		// jobs not parked, then ";n,wait" a run, waits in milliseconds.
		b = append(b, '\t')
		b = strconv.AppendInt(b, int64(r.UnparkedWait*1000+0.5), 10)
		for _, p := range r.Runs {
			b = append(b, ';')
			b = strconv.AppendInt(b, p.N, 10)
			b = append(b, ',')
			b = strconv.AppendInt(b, p.Wait.Milliseconds(), 10)
		}
	}
	return append(b, '\n')
}

// parseRuns reads the field appendRow writes after the binding.
func parseRuns(f []byte, r *Row) error {
	parts := strings.Split(string(f), ";")
	w, err := strconv.ParseInt(parts[0], 10, 64)
	if err != nil {
		return err
	}
	r.UnparkedWait = float64(w) / 1000
	r.Runs = make([]ParkedRun, 0, len(parts)-1)
	for _, p := range parts[1:] {
		var n [2]int64
		fs := strings.Split(p, ",")
		if len(fs) != 2 {
			return fmt.Errorf("run %q: want n,wait", p)
		}
		for i, x := range fs {
			if n[i], err = strconv.ParseInt(x, 10, 64); err != nil {
				return fmt.Errorf("run %q: %w", p, err)
			}
		}
		r.Runs = append(r.Runs, ParkedRun{N: n[0], Wait: time.Duration(n[1]) * time.Millisecond})
	}
	return nil
}

// Reply is one message of a worker's reply, read back.
type Reply struct {
	// Worker names the worker; Part is this message's number, from 1.
	// Parts is 0 but in the last message, where it is how many there are.
	Worker      string
	Part, Parts int
	Rows        []Row
}

// DecodeReply reads one message of a worker's reply.
func DecodeReply(data []byte) (Reply, error) {
	var r Reply
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), replyChunk*2)
	if !sc.Scan() {
		return r, errors.New("empty top reply")
	}
	rest, ok := strings.CutPrefix(sc.Text(), replyMagic+" ")
	if !ok {
		return r, fmt.Errorf("not a top reply: %q", sc.Text())
	}
	if _, err := fmt.Sscanf(rest, "%s %d %d", &r.Worker, &r.Part, &r.Parts); err != nil || r.Part < 1 || (r.Parts != 0 && r.Parts != r.Part) {
		return r, fmt.Errorf("bad top reply header %q", sc.Text())
	}
	held := map[string]string{} // the few reasons, shared by the rows
	for sc.Scan() {
		row, err := parseRow(sc.Bytes(), held)
		if err != nil {
			return r, err
		}
		r.Rows = append(r.Rows, row)
	}
	return r, sc.Err()
}

// parseRow reads one row's line; held interns the reasons.
func parseRow(line []byte, held map[string]string) (Row, error) {
	var f [10][]byte
	rest := line
	for i := range 9 {
		j := bytes.IndexByte(rest, '\t')
		if j < 0 {
			return Row{}, fmt.Errorf("bad top row %q", line)
		}
		f[i], rest = rest[:j], rest[j+1:]
	}
	f[9] = rest
	var n [8]int64
	for i := range n {
		v, err := strconv.ParseInt(string(f[i+1]), 10, 64)
		if err != nil {
			return Row{}, fmt.Errorf("bad top row %q: %w", line, err)
		}
		n[i] = v
	}
	binding, runs, hasRuns := bytes.Cut(f[9], []byte{'\t'})
	h, ok := held[string(binding)]
	if !ok {
		h = string(binding)
		held[h] = h
	}
	r := Row{Tenant: string(f[0]), Admitted: float64(n[0]) / 1000, Deferred: float64(n[1]) / 1000,
		Naked: n[2], Moved: n[3], Parked: n[4], Paused: n[5], OldestWait: float64(n[6]) / 1000, DeadLetters: n[7], Binding: h}
	if hasRuns {
		if err := parseRuns(runs, &r); err != nil {
			return Row{}, fmt.Errorf("bad top row %q: %w", line, err)
		}
	}
	return r, nil
}

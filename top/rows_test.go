package top

import (
	"fmt"
	"reflect"
	"testing"
	"time"
)

// TestTopRowsRoundTrip: rows encoded into a worker's reply, over several
// messages, read back the same; a reason's tabs and line breaks cannot
// break a row.
func TestTopRowsRoundTrip(t *testing.T) {
	var rows []Row
	for i := range 20000 {
		rows = append(rows, Row{Tenant: fmt.Sprintf("tenant-%05d", i), Admitted: 1.5, Deferred: float64(i), Naked: 1, Moved: int64(i),
			Parked: 3, Paused: 4, OldestWait: 12.5, DeadLetters: 2, Binding: "paused: a\treason\nwith breaks"})
	}
	// Some rows carry their parked runs (one of woken jobs), one has
	// parked jobs all back (no run) and one no binding.
	rows[8].Runs, rows[8].UnparkedWait = []ParkedRun{{N: 3, Wait: 12500 * time.Millisecond}, {N: -2}}, 1.25
	rows[9].Runs = []ParkedRun{}
	rows[10].Runs, rows[10].Binding = []ParkedRun{{N: 1, Wait: time.Millisecond}}, ""
	chunks := EncodeRows("w1", rows)
	if len(chunks) < 2 {
		t.Fatalf("%d messages for 20,000 rows, want several under %d bytes each", len(chunks), replyChunk)
	}
	var back []Row
	for k, c := range chunks {
		if len(c) > replyChunk+1024 {
			t.Errorf("message %d is %d bytes", k, len(c))
		}
		r, err := DecodeReply(c)
		wantParts := 0
		if k == len(chunks)-1 {
			wantParts = len(chunks)
		}
		if err != nil || r.Worker != "w1" || r.Part != k+1 || r.Parts != wantParts {
			t.Fatalf("message %d read as %s %d/%d, %v", k, r.Worker, r.Part, r.Parts, err)
		}
		back = append(back, r.Rows...)
	}
	if len(back) != len(rows) {
		t.Fatalf("%d rows back, want %d", len(back), len(rows))
	}
	for i := 7; i <= 10; i++ {
		want := rows[i]
		if want.Binding != "" {
			want.Binding = "paused: a reason with breaks"
		}
		if !reflect.DeepEqual(back[i], want) {
			t.Fatalf("row %d back as %+v, want %+v", i, back[i], want)
		}
	}
	if r, err := DecodeReply(EncodeRows("w2", nil)[0]); err != nil || r.Parts != 1 || len(r.Rows) != 0 {
		t.Fatalf("an empty reply read as %+v, %v", r, err)
	}
}

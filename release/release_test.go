package release

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/bundle"
	"github.com/throttler/throttler/header"
	"github.com/throttler/throttler/internal/testenv"
	"github.com/throttler/throttler/subject"
)

const (
	testStream    = "JOBS"
	testSchedules = subject.Schedules("sched")
)

// env is a NATS server with a jobs stream that binds the schedule
// subjects and allows schedules, as a worker sets it up.
type env struct {
	js jetstream.JetStream
}

func setup(t *testing.T) *env {
	t.Helper()
	srv := testenv.StartNATS(t, "")
	js, err := jetstream.New(srv.Connect(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: testStream, Subjects: []string{"jobs.>", testSchedules.All()},
		AllowMsgSchedules: true, AllowDirect: true}); err != nil {
		t.Fatal(err)
	}
	return &env{js: js}
}

// store stores job seq of tenant as a copy parked for reason an hour
// ahead, as a worker parks it, with headers hdr besides.
func (e *env) store(t *testing.T, tenant string, seq uint64, reason string, hdr map[string]string) {
	t.Helper()
	m := &nats.Msg{Subject: testSchedules.Copy(tenant, seq), Data: []byte("job " + strconv.FormatUint(seq, 10)), Header: nats.Header{}}
	m.Header.Set(header.JobID, testStream+":"+strconv.FormatUint(seq, 10))
	m.Header.Set(header.Subject, "jobs."+tenant)
	m.Header.Set(header.Deferrals, "1")
	m.Header.Set(header.WaitReason, reason)
	m.Header.Set(jetstream.ScheduleHeader, "@at "+time.Now().Add(time.Hour).UTC().Format(time.RFC3339))
	m.Header.Set(jetstream.ScheduleTargetHeader, "jobs."+tenant)
	for k, v := range hdr {
		m.Header.Set(k, v)
	}
	if _, err := e.js.PublishMsg(context.Background(), m); err != nil {
		t.Fatal(err)
	}
}

// subjects returns the schedule subjects stored, with their counts.
func (e *env) subjects(t *testing.T) map[string]uint64 {
	t.Helper()
	st, err := e.js.Stream(context.Background(), testStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(context.Background(), jetstream.WithSubjectFilter(testSchedules.All()))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Subjects
}

// woken reads the woken subjects back, in stream order: the jobs' data.
func (e *env) woken(t *testing.T, n int) []string {
	t.Helper()
	cons, err := e.js.OrderedConsumer(context.Background(), testStream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{testSchedules.Wokens()}})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	if n == 0 {
		return out
	}
	batch, err := cons.Fetch(n+1, jetstream.FetchMaxWait(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for m := range batch.Messages() {
		out = append(out, string(m.Data()))
		if m.Headers().Get(header.Released) == "" {
			t.Errorf("woken job %q lacks %s", m.Data(), header.Released)
		}
	}
	return out
}

// TestWaitingBringsBackPausedCopiesInOrder: Waiting publishes every copy
// of the tenant parked for the reason on its woken subject, in the order
// of the jobs (not the order their copies were stored: a job that waited
// for a slot is parked among newer ones), and deletes them; a copy
// waiting for a limit's slot and another tenant's paused copy stay.
func TestWaitingBringsBackPausedCopiesInOrder(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	store := func(tenant string, seq uint64, reason string) {
		t.Helper()
		e.store(t, tenant, seq, reason, nil)
	}
	for _, seq := range []uint64{7, 3, 9} { // paused in this order
		store("acme", seq, "paused: maintenance")
	}
	store("acme", 11, "limit 5/s")
	store("globex", 12, "paused: other")

	n, err := Waiting(ctx, e.js, testStream, testSchedules, "acme", header.WaitPaused, time.Now(), nil)
	if err != nil || n != 3 {
		t.Fatalf("Waiting = %d, %v; want 3", n, err)
	}
	stored := e.subjects(t)
	var woken []string
	for subj := range stored {
		if kind, _ := testSchedules.Parse(subj); kind == subject.WokenKind {
			woken = append(woken, subj)
		}
	}
	if _, ok := stored[testSchedules.Copy("acme", 11)]; !ok {
		t.Error("the copy waiting for a slot was taken")
	}
	if _, ok := stored[testSchedules.Copy("globex", 12)]; !ok {
		t.Error("another tenant's paused copy was taken")
	}
	for _, seq := range []uint64{7, 3, 9} {
		if _, ok := stored[testSchedules.Copy("acme", seq)]; ok {
			t.Errorf("the released copy of job %d is still there", seq)
		}
	}
	// In order: read the woken subjects back by stream sequence.
	cons, err := e.js.OrderedConsumer(ctx, testStream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{testSchedules.Wokens()}})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(3, jetstream.FetchMaxWait(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for m := range batch.Messages() {
		order = append(order, string(m.Data()))
		if m.Headers().Get(header.Woken) == "" {
			t.Errorf("woken job %q lacks %s", m.Data(), header.Woken)
		}
	}
	if len(order) != 3 || order[0] != "job 3" || order[1] != "job 7" || order[2] != "job 9" {
		t.Fatalf("woken in order %v (subjects %v), want job 3, job 7, job 9", order, woken)
	}
}

// TestCoveredBringsBackWhatTheBudgetCovers: Covered brings back, in the
// jobs' order, the longest run of copies parked for credits whose costs
// fit the budget, leaves the rest, and names the first it left; a copy
// parked for another reason is not counted.
func TestCoveredBringsBackWhatTheBudgetCovers(t *testing.T) {
	e := setup(t)
	cost := func(h nats.Header) int64 {
		c, err := header.ParseCost(h, "Job-Cost")
		if err != nil {
			return 0
		}
		return c
	}
	for _, j := range []struct {
		seq  uint64
		cost string
	}{{9, "1"}, {3, "2"}, {5, "3"}, {7, "1"}} { // parked out of order
		e.store(t, "acme", j.seq, header.WaitCredits+": balance 0 cannot cover cost "+j.cost, map[string]string{"Job-Cost": j.cost})
	}
	e.store(t, "acme", 4, header.WaitPaused, map[string]string{"Job-Cost": "1"})

	n, head, err := Covered(context.Background(), e.js, testStream, testSchedules, "acme", header.WaitCredits, time.Now(), 5, cost)
	if err != nil || n != 2 || head != 7 {
		t.Fatalf("Covered(5) = %d, head %d, %v; want jobs 3 and 5 (cost 5), head 7", n, head, err)
	}
	if got := e.woken(t, 2); len(got) != 2 || got[0] != "job 3" || got[1] != "job 5" {
		t.Fatalf("woken %v, want job 3, job 5", got)
	}
	n, head, err = Covered(context.Background(), e.js, testStream, testSchedules, "acme", header.WaitCredits, time.Now(), 10, cost)
	if err != nil || n != 2 || head != 0 {
		t.Fatalf("Covered(10) = %d, head %d, %v; want the 2 left, no head", n, head, err)
	}
}

// TestMovedBringsBackCopiesAndWholeBundles: Moved brings back, in the jobs'
// order and without header.Released, every copy of the tenant moved to
// wait for a slot under its limits, stored alone or in a bundle whose
// every copy does, and deletes them; a paused copy, another tenant's, and
// a bundle holding a paused copy stay, whole; a job brought back before
// (seen) and moved again stays.
func TestMovedBringsBackCopiesAndWholeBundles(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	e.store(t, "acme", 5, "limit 5/s", nil)
	e.store(t, "acme", 2, header.WaitSlot, nil)
	e.store(t, "acme", 8, "paused: maintenance", nil)
	e.store(t, "globex", 4, "limit 5/s", nil)
	moved := e.bundle(t, "acme", "b1", map[uint64]string{1: "limit 5/s", 6: "limit 5/s"})
	mixed := e.bundle(t, "acme", "b2", map[uint64]string{10: "limit 5/s", 12: "paused: maintenance"})

	seen := map[string]bool{}
	n, err := Moved(ctx, e.js, testStream, testSchedules, "acme", time.Now(), MovedOptions{Seen: seen})
	if err != nil || n != 4 {
		t.Fatalf("Moved = %d, %v; want 4", n, err)
	}
	// Job 5 moved again, under the new limits: a second pass leaves it.
	e.store(t, "acme", 5, "limit 40/s", nil)
	if n, err := Moved(ctx, e.js, testStream, testSchedules, "acme", time.Now(), MovedOptions{Seen: seen}); err != nil || n != 0 {
		t.Fatalf("second Moved = %d, %v; want 0: job 5 was brought back before", n, err)
	}
	cons, err := e.js.OrderedConsumer(ctx, testStream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{testSchedules.Wokens()}})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(5, jetstream.FetchMaxWait(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for m := range batch.Messages() {
		order = append(order, string(m.Data()))
		if m.Headers().Get(header.Released) != "" {
			t.Errorf("job %q brought back with %s: it would pass a pause", m.Data(), header.Released)
		}
	}
	if want := []string{"job 1", "job 2", "job 5", "job 6"}; !slices.Equal(order, want) {
		t.Fatalf("woken in order %v, want %v", order, want)
	}
	stored := e.subjects(t)
	for subj, want := range map[string]bool{
		testSchedules.Copy("acme", 5): true, testSchedules.Copy("acme", 2): false, moved: false,
		testSchedules.Copy("acme", 8): true, testSchedules.Copy("globex", 4): true, mixed: true,
	} {
		if _, ok := stored[subj]; ok != want {
			t.Errorf("%s stored: %v, want %v", subj, ok, want)
		}
	}
}

// bundle stores a bundle of tenant's jobs waiting for the given reasons,
// by job sequence, as the workers store it (bundle.Encode), and returns
// its subject.
func (e *env) bundle(t *testing.T, tenant, id string, reasons map[uint64]string) string {
	t.Helper()
	var copies []*nats.Msg
	for seq, reason := range reasons {
		h := nats.Header{}
		h.Set(header.JobID, testStream+":"+strconv.FormatUint(seq, 10))
		h.Set(header.WaitReason, reason)
		h.Set(jetstream.ScheduleHeader, "@at "+time.Now().Add(time.Hour).UTC().Format(time.RFC3339))
		h.Set(jetstream.ScheduleTargetHeader, "jobs."+tenant)
		copies = append(copies, &nats.Msg{Subject: testSchedules.Copy(tenant, seq), Header: h, Data: []byte("job " + strconv.FormatUint(seq, 10))})
	}
	m := &nats.Msg{Subject: testSchedules.Bundle(tenant, id), Data: bundle.Encode(copies), Header: nats.Header{}}
	m.Header.Set(header.Bundle, strconv.Itoa(len(copies)))
	m.Header.Set(jetstream.ScheduleHeader, "@at "+time.Now().Add(time.Hour).UTC().Format(time.RFC3339))
	m.Header.Set(jetstream.ScheduleTargetHeader, testSchedules.Unpack(tenant, id))
	if _, err := e.js.PublishMsg(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	return m.Subject
}

// TestMovedLeavesWhatStaleRefuses: with Stale, Moved brings back the
// copies and bundles whose reasons Stale picks (the limits a tenant no
// longer has) and leaves the others (moved under the limits it has now),
// a bundle whole.
func TestMovedLeavesWhatStaleRefuses(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	e.store(t, "acme", 3, "limit 5/s", nil)
	e.bundle(t, "acme", "b1", map[uint64]string{1: "limit 5/s", 2: "limit 5/s"})
	e.store(t, "acme", 9, "limit 40/s", nil)
	e.store(t, "acme", 7, header.WaitSlot, nil)
	mixed := e.bundle(t, "acme", "b2", map[uint64]string{4: "limit 40/s", 6: "limit 5/s"})

	stale := func(reason string) bool { return reason == "limit 5/s" }
	n, err := Moved(ctx, e.js, testStream, testSchedules, "acme", time.Now(), MovedOptions{Stale: stale})
	if err != nil || n != 3 {
		t.Fatalf("Moved = %d, %v; want 3 (jobs 1, 2 and 3)", n, err)
	}
	stored := e.subjects(t)
	for subj, want := range map[string]bool{
		testSchedules.Copy("acme", 3): false, testSchedules.Copy("acme", 9): true,
		testSchedules.Copy("acme", 7): true, mixed: true,
	} {
		if _, ok := stored[subj]; ok != want {
			t.Errorf("%s stored: %v, want %v", subj, ok, want)
		}
	}
}

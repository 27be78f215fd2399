package throttle_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/throttler/throttler/throttle"
)

// TestCensusCountsParkedJobs: the census counts the jobs waiting in the
// caps' waiting lists of the tenants noted as parking, and the fleet's;
// a tenant whose list emptied is forgotten, and counted again once noted
// again.
func TestCensusCountsParkedJobs(t *testing.T) {
	ce := newCapEnv(t, throttle.Rules{Default: throttle.Policy{Running: 1}}, throttle.CapOptions{})
	ctx := context.Background()
	census := ce.l.Census()
	var first throttle.Result
	for i := range 4 {
		r := ce.job(t, "acme", fmt.Sprintf("j%d", i))
		if i == 0 {
			first = r
		}
	}
	for i := range 3 {
		ce.job(t, "beta", fmt.Sprintf("j%d", 10+i))
	}
	if n, err := census.Parked(ctx); err != nil || n != 0 {
		t.Fatalf("Parked before any tenant was noted: %d, %v; want 0 (the lists are read only for noted tenants)", n, err)
	}
	if err := census.NoteParked(ctx, []string{"acme", "beta", ""}); err != nil {
		t.Fatal(err)
	}
	if n, err := census.Parked(ctx); err != nil || n != 3+2 {
		t.Fatalf("Parked: %d, %v; want 5 (3 of acme, 2 of beta waiting)", n, err)
	}
	// acme's first run ends: its next is called, and leaves the list.
	ce.finish(t, first)
	if n, err := census.Parked(ctx); err != nil || n != 4 {
		t.Fatalf("Parked after a lease freed: %d, %v; want 4", n, err)
	}
	members, err := ce.rdb.SMembers(ctx, ce.prefix+":{~}:census:parkers").Result()
	if err != nil || len(members) != 2 {
		t.Fatalf("parkers %v, %v; want acme and beta", members, err)
	}
}

// TestCensusForgetsEmptyLists: a noted tenant without waiting jobs is
// forgotten at the next count.
func TestCensusForgetsEmptyLists(t *testing.T) {
	ce := newCapEnv(t, throttle.Rules{Default: throttle.Policy{Running: 1}}, throttle.CapOptions{})
	ctx := context.Background()
	census := ce.l.Census()
	if err := census.NoteParked(ctx, []string{"idle"}); err != nil {
		t.Fatal(err)
	}
	if n, err := census.Parked(ctx); err != nil || n != 0 {
		t.Fatalf("Parked: %d, %v; want 0", n, err)
	}
	if n, err := ce.rdb.SCard(ctx, ce.prefix+":{~}:census:parkers").Result(); err != nil || n != 0 {
		t.Fatalf("%d tenants still noted (%v); want the idle one forgotten", n, err)
	}
}

// TestCensusInHandAndCounts: reports of jobs in hand are summed while
// fresh and forgotten once old; one worker holds the counter at a time,
// and the counts it publishes are what every worker reads.
func TestCensusInHandAndCounts(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	census := newLimiter(t, e.rdb, e.prefix, time.Minute, throttle.Limits{throttle.PerMinute(1, 1)}).Census()
	now := time.Now()
	for w, n := range map[string]int{"a": 5, "b": 7} {
		if err := census.ReportInHand(ctx, w, n, now); err != nil {
			t.Fatal(err)
		}
	}
	if err := census.ReportInHand(ctx, "gone", 100, now.Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	if n, err := census.InHand(ctx, now.Add(-30*time.Second)); err != nil || n != 12 {
		t.Fatalf("InHand: %d, %v; want 12 (the gone worker's report too old)", n, err)
	}
	if n, err := e.rdb.HLen(ctx, e.prefix+":{~}:census:hands").Result(); err != nil || n != 2 {
		t.Fatalf("%d reports kept (%v); want the old one forgotten", n, err)
	}

	if ok, err := census.TakeCounter(ctx, "a", time.Minute); err != nil || !ok {
		t.Fatalf("a takes the counter: %v, %v", ok, err)
	}
	if ok, err := census.TakeCounter(ctx, "b", time.Minute); err != nil || ok {
		t.Fatalf("b takes the counter a holds: %v, %v; want false", ok, err)
	}
	if ok, err := census.TakeCounter(ctx, "a", time.Minute); err != nil || !ok {
		t.Fatalf("a extends its term: %v, %v", ok, err)
	}

	if counts, at, err := census.Counts(ctx); err != nil || len(counts) != 0 || !at.IsZero() {
		t.Fatalf("Counts before any: %v at %v, %v", counts, at, err)
	}
	want := map[string]int64{"nak": 13, "scheduled": 3137, "parked": 1691}
	if err := census.Publish(ctx, want, now); err != nil {
		t.Fatal(err)
	}
	counts, at, err := census.Counts(ctx)
	if err != nil || at.UnixMilli() != now.UnixMilli() || len(counts) != 3 {
		t.Fatalf("Counts: %v at %v, %v", counts, at, err)
	}
	for k, v := range want {
		if counts[k] != v {
			t.Errorf("%s: %d, want %d", k, counts[k], v)
		}
	}
}

// TestCensusKeysExpireWithTheFleet: every key the census writes carries a
// TTL, so that a fleet that stops leaves nothing behind for ever; the
// counter renews the sets of tenants and levels still waiting.
func TestCensusKeysExpireWithTheFleet(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	census := newLimiter(t, e.rdb, e.prefix, time.Minute, throttle.Limits{throttle.PerMinute(1, 1)}).Census()
	if err := census.NoteParked(ctx, []string{"acme"}); err != nil {
		t.Fatal(err)
	}
	if err := census.NoteQueued(ctx, []string{"_global"}); err != nil {
		t.Fatal(err)
	}
	if err := census.ReportInHand(ctx, "a", 3, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := census.Publish(ctx, map[string]int64{"nak": 1}, time.Now()); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"parkers", "queuers", "hands", "counts"} {
		key := e.prefix + ":{~}:census:" + k
		if ttl, err := e.rdb.PTTL(ctx, key).Result(); err != nil || ttl <= 0 {
			t.Errorf("%s: TTL %v (%v); want one", key, ttl, err)
		}
	}
}

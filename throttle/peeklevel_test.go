package throttle_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/throttler/throttler/internal/testenv"
	"github.com/throttler/throttler/throttle"
)

// placesOf reads a level's list, member → place, as the function wrote it.
func placesOf(t *testing.T, rdb *redis.Client, list string) []redis.Z {
	t.Helper()
	zs, err := rdb.ZRangeWithScores(context.Background(), list, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	return zs
}

// TestPeekLevelShowsItsTermsListAndPasses queues a's 30 jobs and b's 5 at
// a global 10/s:1, then peeks: the term's bucket is spent, the list's
// length and its two flows are what share answered, the head names a
// first with all its waiting jobs and b with its, the passes are the
// grants with a slot ahead, and nothing was written.
func TestPeekLevelShowsItsTermsListAndPasses(t *testing.T) {
	ctx := context.Background()
	s, e := newShared(t, throttle.Limits{{Rate: 10, Period: time.Second, Burst: 1}},
		throttle.SharedOptions{Lookahead: 50 * time.Millisecond, Direct: 150 * time.Millisecond})
	waiting := map[string]int{}
	ahead := 0
	for _, tn := range []string{"a", "b"} {
		lv, js := levelJobs(tn, 1, map[string]int{"a": 30, "b": 5}[tn])
		ds, errs, _ := s.Decide(ctx, lv, js)
		for i, d := range ds {
			if errs[i] != nil {
				t.Fatal(errs[i])
			}
			switch {
			case !d.Passed:
				waiting[tn]++
			case d.Wait > 0:
				ahead++
			}
		}
	}
	if waiting["a"] == 0 || waiting["b"] == 0 || ahead == 0 {
		t.Fatalf("waiting %v, granted ahead %d: want jobs of both tenants queued and one granted a slot ahead", waiting, ahead)
	}
	before := dumpAll(t, e)
	at := time.Now()
	snap, err := s.Peek(ctx, throttle.Global, at)
	if err != nil {
		t.Fatal(err)
	}
	if after := dumpAll(t, e); !maps.Equal(after, before) {
		t.Fatalf("Peek wrote:\nbefore %v\nafter  %v", before, after)
	}
	if !snap.At.Equal(at) || snap.Level != throttle.Global || len(snap.Buckets) != 1 || !snap.Buckets[0].Stored ||
		snap.Buckets[0].Tokens >= 1 || snap.Wait <= 0 || snap.Binding.Rate != 10 {
		t.Fatalf("terms: %+v, wait %s held by %v; want the spent 10/s:1 bucket making a job wait", snap.Buckets, snap.Wait, snap.Binding)
	}
	if !strings.Contains(snap.Buckets[0].Key, "{~.global}") {
		t.Fatalf("bucket key %q is not the global level's", snap.Buckets[0].Key)
	}
	if snap.Queued != int64(waiting["a"]+waiting["b"]) || snap.Flows != 2 || !snap.FlowsExact {
		t.Fatalf("queued %d, flows %d (exact %v); want %d and 2, exact", snap.Queued, snap.Flows, snap.FlowsExact, waiting["a"]+waiting["b"])
	}
	want := []throttle.TenantJobs{{Tenant: "a", Jobs: waiting["a"]}, {Tenant: "b", Jobs: waiting["b"]}}
	if waiting["b"] > waiting["a"] {
		want[0], want[1] = want[1], want[0]
	}
	if snap.HeadRead != int(snap.Queued) || !slices.Equal(snap.Head, want) {
		t.Fatalf("head: %+v of %d read; want %+v of %d", snap.Head, snap.HeadRead, want, snap.Queued)
	}
	if snap.Passes != int64(ahead) || snap.PassesAhead != int64(ahead) {
		t.Fatalf("passes %d, ahead %d; want the %d granted a slot ahead", snap.Passes, snap.PassesAhead, ahead)
	}
	// Once the list is called empty (every job's turn came) no flow
	// waits, and the passes of the called jobs are counted.
	deadline := time.Now().Add(10 * time.Second)
	for snap.Queued > 0 && time.Now().Before(deadline) {
		if _, err := s.Poke(ctx, []throttle.Level{throttle.Global}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
		if snap, err = s.Peek(ctx, throttle.Global, time.Time{}); err != nil {
			t.Fatal(err)
		}
	}
	if snap.Queued != 0 || snap.Flows != 0 || len(snap.Head) != 0 || snap.Passes < int64(waiting["a"]+waiting["b"]) {
		t.Fatalf("after every call: queued %d, flows %d, head %+v, passes %d; want none waiting and a pass for each called job",
			snap.Queued, snap.Flows, snap.Head, snap.Passes)
	}
}

// TestPeekLevelWithoutState peeks a group level nothing was decided at:
// a full bucket, nothing queued, exact.
func TestPeekLevelWithoutState(t *testing.T) {
	e := setup(t)
	l := newLimiter(t, e.rdb, e.prefix, time.Minute, throttle.Limits{{Rate: 1000, Period: time.Second, Burst: 1000}})
	s, err := throttle.NewShared(l, throttle.LevelRules{DefaultGroup: throttle.Policy{Limits: throttle.Limits{{Rate: 5, Period: time.Second, Burst: 5}}}}, throttle.SharedOptions{})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := s.Peek(context.Background(), throttle.Level{Group: "org-1"}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Buckets) != 1 || snap.Buckets[0].Stored || snap.Buckets[0].Tokens != 5 || snap.Wait != 0 ||
		snap.Queued != 0 || snap.Flows != 0 || !snap.FlowsExact || snap.Passes != 0 || len(keys(t, e.rdb, e.prefix)) != 0 {
		t.Fatalf("an untouched group level: %+v", snap)
	}
	if !strings.Contains(snap.Buckets[0].Key, "{~.g.org-1}") {
		t.Fatalf("bucket key %q is not org-1's", snap.Buckets[0].Key)
	}
}

// TestQueuesNameTheLevelsOfATenantsJobs queues a's jobs under the
// global level and under group org-1, and b's under the global level:
// Queues names for each tenant the levels queueing its jobs, with their
// counts and the jobs placed before its first, and none for c.
func TestQueuesNameTheLevelsOfATenantsJobs(t *testing.T) {
	ctx := context.Background()
	e := setup(t)
	l := newLimiter(t, e.rdb, e.prefix, time.Minute, throttle.Limits{{Rate: 1000, Period: time.Second, Burst: 1000}})
	one := throttle.Policy{Limits: throttle.Limits{{Rate: 1, Period: time.Second, Burst: 1}}}
	s, err := throttle.NewShared(l, throttle.LevelRules{GlobalPolicy: one, Groups: map[string]throttle.Policy{"org-1": one}}, throttle.SharedOptions{})
	if err != nil {
		t.Fatal(err)
	}
	org := throttle.Level{Group: "org-1"}
	queue := func(lvl throttle.Level, tn string, from, n int) int {
		lv, js := levelJobs(tn, from, n)
		for i := range lv {
			lv[i] = lvl
		}
		ds, errs, _ := s.Decide(ctx, lv, js)
		q := 0
		for i, d := range ds {
			if errs[i] != nil {
				t.Fatal(errs[i])
			}
			if !d.Passed {
				q++
			}
		}
		return q
	}
	qa := queue(throttle.Global, "a", 1, 6)
	qb := queue(throttle.Global, "b", 1, 4)
	qo := queue(org, "a", 100, 3)
	if qa == 0 || qb == 0 || qo == 0 {
		t.Fatalf("queued a %d, b %d, a under org-1 %d: want some of each", qa, qb, qo)
	}
	// firstAhead counts the members of a list placed before tenant's first.
	firstAhead := func(lvl throttle.Level, tn string) int64 {
		tag := "{~.global}"
		if lvl.Group != "" {
			tag = "{~.g." + lvl.Group + "}"
		}
		zs := placesOf(t, e.rdb, e.prefix+":"+tag+":lw")
		for i, z := range zs {
			if strings.Contains(z.Member.(string), "/"+tn+"/") {
				return int64(i)
			}
		}
		t.Fatalf("no job of %s in %s's list", tn, lvl)
		return 0
	}
	cases := []struct {
		tenant string
		want   []throttle.LevelQueue
	}{
		{"a", []throttle.LevelQueue{
			{Level: throttle.Global, Jobs: qa, Exact: true, Ahead: firstAhead(throttle.Global, "a"), Queued: int64(qa + qb)},
			{Level: org, Jobs: qo, Exact: true, Ahead: 0, Queued: int64(qo)},
		}},
		{"b", []throttle.LevelQueue{{Level: throttle.Global, Jobs: qb, Exact: true, Ahead: firstAhead(throttle.Global, "b"), Queued: int64(qa + qb)}}},
		{"c", nil},
	}
	for _, c := range cases {
		got, err := s.Queues(ctx, c.tenant)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("Queues(%s) = %+v, want %+v", c.tenant, got, c.want)
		}
	}
	// b's first job, a flow with nothing placed past V, stands ahead of
	// a's backlog: a's first is then behind it.
	if firstAhead(throttle.Global, "a") == 0 && firstAhead(throttle.Global, "b") == 0 {
		t.Error("neither a's first job nor b's has a job before it: the test does not tell Ahead from 0")
	}
}

// TestQueuesOnACluster queues a's jobs under the global level and eight
// groups, whose keys spread over a three-master Redis Cluster: Queues
// finds every level on whichever master holds it, and Peek reads each.
func TestQueuesOnACluster(t *testing.T) {
	ctx := context.Background()
	cluster := testenv.StartRedisCluster(t, 3)
	rdb := cluster.Client(t)
	l := newLimiter(t, rdb, testPrefix(t), time.Minute, throttle.Limits{{Rate: 1000, Period: time.Second, Burst: 1000}})
	if err := l.Load(ctx); err != nil {
		t.Fatal(err)
	}
	one := throttle.Policy{Limits: throttle.Limits{{Rate: 1, Period: time.Second, Burst: 1}}}
	s, err := throttle.NewShared(l, throttle.LevelRules{GlobalPolicy: one, DefaultGroup: one}, throttle.SharedOptions{})
	if err != nil {
		t.Fatal(err)
	}
	levels := []throttle.Level{throttle.Global}
	for i := range 8 {
		levels = append(levels, throttle.Level{Group: fmt.Sprintf("org-%d", i)})
	}
	for _, lvl := range levels {
		lv, js := levelJobs("a", 1, 3)
		for i := range lv {
			lv[i] = lvl
		}
		if _, errs, _ := s.Decide(ctx, lv, js); errs[0] != nil {
			t.Fatal(errs[0])
		}
	}
	got, err := s.Queues(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	var named []throttle.Level
	for _, h := range got {
		if h.Jobs != 2 || !h.Exact || h.Queued != 2 || h.Ahead != 0 {
			t.Errorf("%s: %+v; want a's 2 jobs queued there, first in line", h.Level, h)
		}
		named = append(named, h.Level)
	}
	if !slices.Equal(named, levels) {
		t.Fatalf("Queues named %v, want %v", named, levels)
	}
	for _, lvl := range levels {
		snap, err := s.Peek(ctx, lvl, time.Time{})
		if err != nil || snap.Queued != 2 || snap.Flows != 1 || len(snap.Buckets) != 1 || !snap.Buckets[0].Stored {
			t.Fatalf("Peek(%s): %+v, %v; want 2 of a's jobs queued and the spent bucket", lvl, snap, err)
		}
	}
}

// TestPeekGlobalLevelWithGroups: at the global level the jobs of groups
// keep their tenants' places within each group in the fair hash; a peek
// counts the groups (and ungrouped tenants) as the flows waiting, not
// those places, and does not take them for a malformed state.
func TestPeekGlobalLevelWithGroups(t *testing.T) {
	ctx := context.Background()
	s, _ := newShared(t, throttle.Limits{{Rate: 1, Period: time.Second, Burst: 1}}, throttle.SharedOptions{})
	var lvs []throttle.Level
	var js []throttle.LevelJob
	for i, j := range []struct{ tenant, flow string }{
		{"a1", "org1"}, {"a1", "org1"}, {"a2", "org1"}, {"a2", "org1"}, {"b1", "org2"}, {"b1", "org2"}, {"solo", "solo"}, {"solo", "solo"},
	} {
		lvs = append(lvs, throttle.Global)
		js = append(js, throttle.LevelJob{Tenant: j.tenant, JobID: fmt.Sprintf("g:%d", i), Flow: j.flow, Cost: 1, Weight: 1})
	}
	if _, errs, _ := s.Decide(ctx, lvs, js); errors.Join(errs...) != nil {
		t.Fatal(errors.Join(errs...))
	}
	snap, err := s.Peek(ctx, throttle.Global, time.Time{})
	if err != nil {
		t.Fatalf("peek of the global level with groups: %v", err)
	}
	if snap.Queued == 0 || snap.Flows != 3 || !snap.FlowsExact {
		t.Errorf("peek: %d queued, %d flows waiting (exact %v); want jobs queued, and the 3 flows org1, org2 and solo", snap.Queued, snap.Flows, snap.FlowsExact)
	}
}

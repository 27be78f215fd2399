package throttle_test

import (
	"context"
	"time"

	"testing"
)

// TestShareChecksTheLevelsStateBeforeAnyWrite: a level whose bucket holds
// a malformed state, or another Redis type, refuses share's whole call
// (and unshare's) before its first write, whatever the number of jobs:
// no job of the batch is listed, granted or given back.
func TestShareChecksTheLevelsStateBeforeAnyWrite(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	decide := decideFn()
	share := "share" + decide[len("decide"):]
	unshare := "unshare" + decide[len("decide"):]
	p := e.prefix + ":{~.global}"
	bucket := p + ":l:1000000"
	keys := []string{p + ":lw", p + ":lv", p + ":lp", p + ":lx", bucket, p + ":lg"}
	// Two jobs, the level's limit 1/s with a burst of 1: the second would
	// be queued.
	args := []string{"0", "100000", "250000", "60000", "1", "1", "1000000", "1",
		"1/acme/s:1", "acme", "1", "1", "0", "1/acme/s:2", "acme", "1", "1", "0"}
	give := []string{"0", "1", "1", "1000000", "1", "1/acme/s:1", "acme", "1", "1", "0", "1"}
	for _, c := range []struct {
		name  string
		store func() error
		want  []int64
	}{
		{"malformed", func() error { return e.rdb.Set(ctx, bucket, "garbage", time.Minute).Err() }, []int64{3, 10, 5, 0}},
		{"no TTL", func() error { return e.rdb.Set(ctx, bucket, "0123456789abcdef", 0).Err() }, nil},
		{"another type", func() error { return e.rdb.HSet(ctx, bucket, "f", "v").Err() }, []int64{5, 5, 0, 0}},
	} {
		if err := e.rdb.Del(ctx, bucket).Err(); err != nil {
			t.Fatal(err)
		}
		if err := c.store(); err != nil {
			t.Fatal(err)
		}
		got := fcallRaw(t, e.rdb, share, keys, args)
		if len(got) != 4 || (c.want != nil && (got[0] != c.want[0] || got[1] != c.want[1] || got[2] != c.want[2])) ||
			(c.want == nil && (got[0] != 3 || got[2] != 5)) {
			t.Errorf("%s: share replied %v, want %v (the whole call refused)", c.name, got, c.want)
		}
		if ks := keysOf(t, e, p); len(ks) != 1 || ks[0] != bucket {
			t.Errorf("%s: the refused share wrote %v", c.name, ks)
		}
		// unshare's reply is a count when it gives back; a tuple when it
		// refuses the call.
		got, err := fcallErr(e.rdb, unshare, []string{p + ":lv", p + ":lp", p + ":lx", bucket}, give)
		if err != nil || len(got) != 4 || got[0] == 1 {
			t.Errorf("%s: unshare replied %v (%v), want the whole call refused", c.name, got, err)
		}
		if ks := keysOf(t, e, p); len(ks) != 1 || ks[0] != bucket {
			t.Errorf("%s: the refused unshare wrote %v", c.name, ks)
		}
	}
}

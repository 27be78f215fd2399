package throttle_test

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"
)

// TestSharedBucketRefusalNamesEachJobsKey sends three jobs of one tenant,
// each with its own job id, whose bucket cannot be read (a list; a
// malformed state) straight to the decide function: each job is refused
// naming its own KEYS position of the bucket, whether the call takes the
// worker's path (one limit each) or the general one (a second limit each),
// and nothing of the jobs is written.
func TestSharedBucketRefusalNamesEachJobsKey(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	for _, limits := range []int{1, 2} {
		for _, bad := range []string{"list", "state"} {
			name := fmt.Sprintf("shared-%d-%s", limits, bad)
			state, _ := rawKeys(e.prefix, name, limits)
			var keys []string
			args := []string{nowMicros, "1000000"}
			var want []int64
			for k := range 3 {
				// Each job: its limits' buckets (the first shared), its
				// reservation and its owner.
				first := len(keys) + 1
				keys = append(keys, state[0])
				args = append(args, "1", "0", "0", fmt.Sprint(limits), "10", "1000000", "5")
				for l := 1; l < limits; l++ {
					keys = append(keys, fmt.Sprintf("%s:{%s}:l:60000000:%d", e.prefix, name, k))
					args = append(args, "10", "60000000", "5")
				}
				keys = append(keys,
					fmt.Sprintf("%s:{%s}:j:job%d", e.prefix, name, k),
					fmt.Sprintf("%s:{%s}:o:job%d", e.prefix, name, k))
				if bad == "list" {
					want = append(want, 5, int64(first), 0, 0)
				} else {
					want = append(want, 3, eState, int64(first), 0)
				}
			}
			if bad == "list" {
				if err := e.rdb.LPush(ctx, state[0], "x").Err(); err != nil {
					t.Fatalf("LPUSH: %v", err)
				}
			} else if err := e.rdb.Set(ctx, state[0], packedState(t0.UnixMicro(), 0, 10)+"x", time.Minute).Err(); err != nil {
				t.Fatalf("SET: %v", err)
			}
			// The jobs' own keys (the shared bucket may be a list, which
			// snap cannot read).
			var own []string
			for _, k := range keys {
				if k != state[0] {
					own = append(own, k)
				}
			}
			before := snap(t, e.rdb, own...)
			if got := fcallRaw(t, e.rdb, decideFn(), keys, args); !reflect.DeepEqual(got, want) {
				t.Fatalf("%s: reply %v, want %v", name, got, want)
			}
			if after := snap(t, e.rdb, own...); !reflect.DeepEqual(after, before) {
				t.Fatalf("%s: refused jobs wrote: before %v, after %v", name, before, after)
			}
		}
	}
}

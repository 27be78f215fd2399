package consumer

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/throttler/throttler/fastlane/fastcopy"
	"github.com/throttler/throttler/throttle"
)

// TestStagesInOrder: each kind of result is asked of the stage that owns
// it first, and a reserved job the short wait declines goes on to the
// defer loop; a job Redis failed to decide is handed back while the
// worker stops, else put to the Redis error policy.
func TestStagesInOrder(t *testing.T) {
	e := setup(t)
	w, err := New(e.params)
	if err != nil {
		t.Fatal(err)
	}
	running := context.Background()
	stopped, cancel := context.WithCancel(context.Background())
	cancel()
	decided := func(o throttle.Outcome) throttle.Result {
		return throttle.Result{Decision: throttle.Decision{Outcome: o}}
	}
	overWindow := decided(throttle.Limited)
	overWindow.Binding = throttle.Limit{Rate: 5, Unit: "d", DeadLetter: true}
	claimed := decided(throttle.Duplicate)
	claimed.Owner = fastcopy.Incarnation(7)
	invalid := throttle.Result{Err: &throttle.InvalidError{Code: throttle.CodeCostOverBurst}}
	failed := throttle.Result{Err: errors.New("redis: i/o timeout")}
	for _, tc := range []struct {
		name string
		ctx  context.Context
		res  throttle.Result
		want []string // the stages whose condition it meets, in order
	}{
		{"claimed by the lane", running, claimed, []string{"*consumer.laneAdapter", "consumer.duplicates", "*consumer.deferSettler"}},
		{"a duplicate", running, decided(throttle.Duplicate), []string{"consumer.duplicates", "*consumer.deferSettler"}},
		{"capped", running, decided(throttle.Capped), []string{"*consumer.capKeeper", "*consumer.deferSettler"}},
		{"queued", running, decided(throttle.Queued), []string{"*consumer.levelKeeper", "*consumer.deferSettler"}},
		{"unfunded", running, decided(throttle.Unfunded), []string{"consumer.unfunded", "*consumer.deferSettler"}},
		{"admitted", running, decided(throttle.Admitted), []string{"*consumer.handlerRunner", "*consumer.deferSettler"}},
		{"over a window that refuses", running, overWindow, []string{"*consumer.deadLetter", "*consumer.deferSettler"}},
		{"reserved", running, decided(throttle.Reserved), []string{"*consumer.shortWait", "*consumer.deferSettler"}},
		{"limited", running, decided(throttle.Limited), []string{"*consumer.deferSettler"}},
		{"invalid", running, invalid, []string{"*consumer.deadLetter", "*consumer.redisHealth"}},
		{"Redis failed while stopping", stopped, failed, []string{"*consumer.puller", "*consumer.redisHealth"}},
		{"Redis failed", running, failed, []string{"*consumer.redisHealth"}},
	} {
		g := &groupActs{ctx: tc.ctx, work: running}
		var got []string
		for _, s := range w.lifecycle.stages {
			if s.when(g, tc.res) {
				got = append(got, fmt.Sprintf("%T", s.stage))
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%s: asked %v, want %v", tc.name, got, tc.want)
		}
	}
}

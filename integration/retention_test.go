package integration

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/internal/testenv"
)

// maxAges reads the max age of each named stream.
func (e *env) maxAges(names ...string) map[string]time.Duration {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got := map[string]time.Duration{}
	for _, n := range names {
		s, err := e.js.Stream(ctx, n)
		if err != nil {
			e.t.Fatalf("stream %s: %v", n, err)
		}
		got[n] = s.CachedInfo().Config.MaxAge
	}
	return got
}

// TestStreamsTheWorkerCreatesAreBounded: the jobs, forward and dead-letter
// streams a worker creates get their THROTTLER_*_MAX_AGE, and streams it
// finds without any bound are left as they are, with a warning at start.
func TestStreamsTheWorkerCreatesAreBounded(t *testing.T) {
	for _, tt := range []struct {
		name string
		vars map[string]string
		want map[string]time.Duration
	}{
		{"Defaults", nil, map[string]time.Duration{"JOBS": 7 * 24 * time.Hour, "JOBS_FORWARD": 7 * 24 * time.Hour, "JOBS_DLQ": 30 * 24 * time.Hour}},
		{"Set", map[string]string{"THROTTLER_STREAM_MAX_AGE": "2h", "THROTTLER_FORWARD_MAX_AGE": "3h", "THROTTLER_DLQ_MAX_AGE": "0"},
			map[string]time.Duration{"JOBS": 2 * time.Hour, "JOBS_FORWARD": 3 * time.Hour, "JOBS_DLQ": 0}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := setup(t)
			var log testenv.Buffer
			w := e.startWorkerWith(e.config(tt.vars), nil, slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelWarn})))
			testenv.Eventually(t, 20*time.Second, "the worker built", w.built)
			got := e.maxAges("JOBS", "JOBS_FORWARD", "JOBS_DLQ")
			for n, want := range tt.want {
				if got[n] != want {
					t.Errorf("stream %s: max age %s, want %s", n, got[n], want)
				}
			}
			if strings.Contains(log.String(), "keeps every message") {
				t.Errorf("a warning about unbounded streams:\n%s", log.String())
			}
		})
	}

	t.Run("ExistingUnboundedStreamsWarned", func(t *testing.T) {
		e := setup(t)
		e.createJobsStream(jetstream.StreamConfig{Name: "JOBS", Subjects: []string{"jobs.>"}})
		e.createJobsStream(jetstream.StreamConfig{Name: "OUT", Subjects: []string{"done.*"}})
		var log testenv.Buffer
		w := e.startWorkerWith(e.config(nil), nil, slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelWarn})))
		testenv.Eventually(t, 20*time.Second, "the worker built", w.built)
		for _, want := range []string{
			`msg="stream JOBS keeps every message for ever`, "nats stream edit JOBS --max-age 7d", "bound_for_new_streams=THROTTLER_STREAM_MAX_AGE",
			`msg="stream OUT keeps every message for ever`, `uses="it stores done.*"`,
		} {
			if !strings.Contains(log.String(), want) {
				t.Errorf("the log lacks %s:\n%s", want, log.String())
			}
		}
		if strings.Contains(log.String(), "stream JOBS_DLQ keeps") {
			t.Errorf("the dead-letter stream the worker created is said unbounded:\n%s", log.String())
		}
		got := e.maxAges("JOBS", "OUT", "JOBS_DLQ")
		if got["JOBS"] != 0 || got["OUT"] != 0 || got["JOBS_DLQ"] != 30*24*time.Hour {
			t.Errorf("max ages %v: want existing streams unchanged and JOBS_DLQ 720h", got)
		}
	})
}

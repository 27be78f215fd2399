package app

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/throttler/throttler/config"
	"github.com/throttler/throttler/throttle"
)

// A worker that NAKs warns of a weekly or monthly window when its jobs
// stream drops messages before such a job's wait is over, and only then.
func TestWarnLongWindows(t *testing.T) {
	policy := func(spec string) throttle.Policy {
		p, err := throttle.ParsePolicy(spec, 0)
		if err != nil {
			t.Fatalf("ParsePolicy(%q): %v", spec, err)
		}
		return p
	}
	monthly := throttle.Rules{Default: policy("100/s"), Tenants: map[string]throttle.Policy{"acme": policy("window:500/mo")}}
	for _, c := range []struct {
		name  string
		path  deferPath
		rules throttle.Rules
		warns bool
	}{
		{"nak, 7 days, monthly", deferPath{mode: config.DeferNak, maxAge: 7 * 24 * time.Hour}, monthly, true},
		{"nak, weekly default", deferPath{mode: config.DeferNak, maxAge: 7 * 24 * time.Hour}, throttle.Rules{Default: policy("window:10/w")}, true},
		{"auto moves them", deferPath{mode: config.DeferAuto, maxAge: 7 * 24 * time.Hour}, monthly, false},
		{"no max age", deferPath{mode: config.DeferNak}, monthly, false},
		{"daily only", deferPath{mode: config.DeferNak, maxAge: 7 * 24 * time.Hour}, throttle.Rules{Default: policy("window:10/d")}, false},
		{"dead-lettered, not reserved", deferPath{mode: config.DeferNak, maxAge: 7 * 24 * time.Hour}, throttle.Rules{Default: policy("window:10/mo:dlq")}, false},
	} {
		var buf bytes.Buffer
		c.path.warnLongWindows(c.rules, slog.New(slog.NewTextHandler(&buf, nil)))
		if got := strings.Contains(buf.String(), "weekly or monthly window"); got != c.warns {
			t.Errorf("%s: warned %v, want %v: %s", c.name, got, c.warns, buf.String())
		}
		if c.warns && !strings.Contains(buf.String(), "window:") {
			t.Errorf("%s: the warning names no limit: %s", c.name, buf.String())
		}
	}
}

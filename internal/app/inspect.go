package app

import (
	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/config"
	"github.com/throttler/throttler/internal/inspect"
	"github.com/throttler/throttler/limits"
	"github.com/throttler/throttler/tenant"
	"github.com/throttler/throttler/throttle"
)

// InspectSources names what `throttler inspect` and the admin API read
// about a tenant or a shared level, on the servers these settings
// configure.
func (s *Settings) InspectSources(js jetstream.JetStream, rdb throttle.Client) inspect.Sources {
	src := inspect.Sources{
		JetStream: js, Redis: rdb, LimitsBucket: s.LimitsBucket,
		Rules:     s.Rules,
		Reader:    s.LimitsReader(),
		KeyPrefix: s.KeyPrefix, TimeZone: s.Location(), Horizon: s.MaxDefer, MaxRunning: s.MaxRunning, Stream: s.Stream, Schedules: s.Schedules,
		Subjects: s.Subjects, TenantFromToken: s.TenantFromToken,
		Levels: s.Levels,
	}
	if s.GroupFrom != (tenant.Source{}) {
		src.GroupFrom = s.GroupFrom.String()
	}
	if s.LimitsBucket == config.LimitsOff {
		src.LimitsBucket = ""
	}
	if s.PauseBucket != config.LimitsOff {
		src.PauseBucket = s.PauseBucket
	}
	return src
}

// LimitsReader reads limits-bucket values as the workers these settings
// configure do.
func (s *Settings) LimitsReader() limits.Reader {
	return limits.Reader{DefaultBurst: s.DefaultBurst, ShadowAll: s.Shadow, NoCaps: s.Handler == config.HandlerForward}
}

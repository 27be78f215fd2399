package config

import "time"

// The values of THROTTLER_ON_REDIS_ERROR.
const (
	// OnRedisErrorDefer defers the job as if it were limited.
	OnRedisErrorDefer = "defer"
	// OnRedisErrorAllow handles the job without throttling it.
	OnRedisErrorAllow = "allow"
)

// DeferMode says how a job that must wait is deferred.
type DeferMode string

// The values of THROTTLER_DEFER.
const (
	// DeferAuto schedules waits of at least ScheduleAfter and naks shorter ones.
	DeferAuto DeferMode = "auto"
	// DeferNak always uses NakWithDelay.
	DeferNak DeferMode = "nak"
	// DeferSchedule always moves the job out of the consumer.
	DeferSchedule DeferMode = "schedule"
)

// FastLaneMode says whether the fast lane runs.
type FastLaneMode string

// The values of THROTTLER_FAST_LANE.
const (
	// FastLaneAuto runs the lane wherever the jobs stream allows it.
	FastLaneAuto FastLaneMode = "auto"
	// FastLaneOff never runs the lane.
	FastLaneOff FastLaneMode = "off"
)

// The values of THROTTLER_HANDLER.
const (
	// HandlerForward publishes each admitted job to ForwardSubject.
	HandlerForward = "forward"
	// HandlerHTTP sends each admitted job to HTTPURL.
	HandlerHTTP = "http"
)

// HeaderField is one static header of THROTTLER_HTTP_HEADERS.
type HeaderField struct {
	// Name is the header's name, Value its value.
	Name, Value string
}

// LimitsOff is the THROTTLER_LIMITS_BUCKET that reads no limits from NATS.
const LimitsOff = "off"

// Location is TimeZone loaded; UTC when it does not load (Validate
// refuses it first).
func (c Config) Location() *time.Location {
	loc, err := time.LoadLocation(c.TimeZone)
	if err != nil {
		return time.UTC
	}
	return loc
}

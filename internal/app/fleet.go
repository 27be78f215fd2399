package app

import (
	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/internal/ops"
)

// Fleet names the streams, consumers and subjects of the fleet these
// settings configure, for the operators' operations (package ops).
func (s *Settings) Fleet(js jetstream.JetStream) ops.Fleet {
	return ops.Fleet{
		JetStream:  js,
		Stream:     s.Stream,
		Consumer:   s.Consumer,
		Subjects:   s.Subjects,
		Schedules:  s.Schedules,
		DLQ:        s.DLQ,
		TenantFrom: s.TenantFrom,
		CostHeader: s.CostHeader,
	}
}

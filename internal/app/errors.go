package app

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// ErrUnsupported marks a configuration the NATS server cannot serve, such
// as THROTTLER_DEFER=schedule on a server without message schedules: a
// setting to change, not a failure to retry.
var ErrUnsupported = errors.New("a setting this NATS server or its streams cannot serve")

// jsErrSubjectsOverlap is the JetStream API error code of a stream whose
// subjects overlap another stream's (JSStreamSubjectOverlapErr).
const jsErrSubjectsOverlap = 10065

// overlapIsConfig turns err, from setting up the jobs stream, into a
// setting to change (ErrUnsupported, naming the variables) when the
// stream's subjects overlap another stream's: retrying cannot help. With
// withSchedules the schedule subjects were asked for too.
func overlapIsConfig(err error, cfg *Settings, withSchedules bool) error {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode != jsErrSubjectsOverlap {
		return err
	}
	vars := "THROTTLER_SUBJECTS"
	if withSchedules {
		vars = "THROTTLER_SUBJECTS or THROTTLER_SCHEDULE_SUBJECT"
	}
	return fmt.Errorf("the jobs stream %s cannot bind its subjects: %s overlaps the subjects of another stream: %w: %w", cfg.Stream, vars, err, ErrUnsupported)
}

// refusedIsConfig turns err, from setting up a stream or a consumer, into
// a setting to change (ErrUnsupported, naming vars) when JetStream refused
// the request as bad (status 400: a name too long, subjects it will not
// bind, …): sending it again cannot help. Any other error is returned as
// it is, to be retried.
func refusedIsConfig(err error, what, vars string) error {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) || apiErr.Code != 400 || errors.Is(err, ErrUnsupported) || unplaced(err) {
		return err
	}
	return fmt.Errorf("JetStream refused %s (%s); check %s: %w: %w", what, apiErr.Description, vars, err, ErrUnsupported)
}

// jsErrNoPeers is the JetStream API error code of a stream whose replicas
// no servers can take now (JSClusterNoPeersErrF, "no suitable peers for
// placement"): a cluster still electing its leaders, or a server down.
// The server answers it with status 400, as a bad request, though it
// passes once the servers are back.
const jsErrNoPeers = 10005

// unplaced reports whether err is JetStream's refusal to place a stream's
// replicas now (jsErrNoPeers), to be retried rather than taken for a
// setting to change.
func unplaced(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jsErrNoPeers
}

// jsErrReplicasNotSupported is the JetStream API error code of a stream
// asked for more than one replica on a server that is not clustered
// (JSStreamReplicasNotSupportedErr).
const jsErrReplicasNotSupported = 10074

// replicasIsConfig turns err, from creating the jobs stream with
// replicas, into a setting to change (ErrUnsupported, naming
// THROTTLER_STREAM_REPLICAS) when the server is not clustered: the server
// answers it as its own failure, which retrying cannot mend.
func replicasIsConfig(err error, replicas int) error {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode != jsErrReplicasNotSupported {
		return err
	}
	return fmt.Errorf("THROTTLER_STREAM_REPLICAS=%d needs a clustered nats-server, and this one is not (%s); set it to 1, or point NATS_URL at a cluster: %w: %w",
		replicas, apiErr.Description, err, ErrUnsupported)
}

// jsErrConsumerCreate is the JetStream API error code of a consumer that
// cannot be created or updated (JSConsumerCreateErrF); its description says
// why.
const jsErrConsumerCreate = 10012

// consumerIsConfig turns err, from creating or updating the durable
// consumer name, into a setting to change (ErrUnsupported, naming
// THROTTLER_CONSUMER) when a consumer of that name exists with settings
// JetStream cannot update (its deliver or ack policy, say): retrying
// cannot help.
func consumerIsConfig(err error, name string) error {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode != jsErrConsumerCreate || !strings.Contains(apiErr.Description, "can not") {
		return err
	}
	return fmt.Errorf("the durable consumer %s exists with settings the worker cannot change (%s); delete it, or set THROTTLER_CONSUMER to another name: %w: %w",
		name, apiErr.Description, err, ErrUnsupported)
}

// serverAtLeast reports whether a "MAJOR.MINOR.PATCH" server version is at
// least major.minor.
func serverAtLeast(version string, major, minor int) bool {
	parts := strings.SplitN(version, ".", 3)
	if len(parts) < 2 {
		return false
	}
	ma, err1 := strconv.Atoi(parts[0])
	mi, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		return false
	}
	return ma > major || (ma == major && mi >= minor)
}

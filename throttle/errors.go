package throttle

import (
	"errors"
	"fmt"
)

// ErrInvalid is matched (errors.Is) by every error about invalid input: a
// bad tenant, job id, cost or limit, or malformed state found in Redis.
// Retrying such a call does not help.
var ErrInvalid = errors.New("throttle: invalid input")

// ErrRedis is matched (errors.Is) by every error that came from Redis or the
// connection to it: timeouts, refused connections, a key of another type
// (WRONGTYPE), a Redis without the engine's functions, and the like.
// Such a call may succeed when retried; nothing is known about its outcome.
var ErrRedis = errors.New("throttle: redis error")

// Code says what was invalid about a call. Codes 2 to 34 are the E_* codes
// of the engine's Redis functions (see lua/head.lua); code 1 is a call
// the functions refused whole (a BADCALL error reply); codes from 100 are
// found in Go before any round trip.
type Code int

// The invalid-input codes.
const (
	CodeArgCount       Code = 1   // KEYS and ARGV do not fit together
	CodeNow            Code = 2   // the explicit time is not a whole number of µs in range
	CodeCost           Code = 3   // cost not in [1, 1e9]
	CodeHorizon        Code = 4   // horizon not in [0, 30 days]
	CodeRate           Code = 6   // a rate out of range
	CodePeriod         Code = 7   // a period out of range
	CodeBurst          Code = 8   // a burst out of range
	CodeCostOverBurst  Code = 9   // the cost exceeds a burst: never admissible
	CodeState          Code = 10  // stored bucket state is malformed
	CodeStateTTL       Code = 11  // stored bucket state has no TTL
	CodeReservation    Code = 12  // stored reservation is malformed
	CodeReservationTTL Code = 13  // stored reservation has no TTL
	CodeIncarnation    Code = 14  // the incarnation is not in [0, 2^53)
	CodeOwner          Code = 15  // stored owner is malformed
	CodeOwnerTTL       Code = 16  // stored owner has no TTL
	CodeFresh          Code = 17  // a job's flags are not 0 to 3
	CodeTTL            Code = 18  // a TTL argument out of range
	CodeGiveUp         Code = 19  // the failure count that gives a job up is not in [1, 10^6]
	CodeFailures       Code = 20  // stored failure counter is malformed
	CodeCap            Code = 21  // a running cap not in [1, 10^6]
	CodeToken          Code = 22  // a lease's owner token is malformed
	CodeMember         Code = 23  // a waiting-list member is malformed
	CodeLeaseOp        Code = 24  // an unknown lease (or credits) operation
	CodeCredits        Code = 25  // a stored balance of credits is malformed
	CodePaid           Code = 26  // a stored paid marker is malformed
	CodePaidTTL        Code = 27  // a stored paid marker has no TTL
	CodeOrder          Code = 28  // a job's order is not in [0, 2^53)
	CodeAmount         Code = 29  // an amount of credits out of range, or a balance past MaxCredits
	CodeDirection      Code = 30  // a settle's direction or credits flag is unknown
	CodeSettled        Code = 31  // a stored settled marker is malformed
	CodeSettledTTL     Code = 32  // a stored settled marker has no TTL
	CodeShift          Code = 33  // a tenant's stored shift is malformed
	CodeShiftTTL       Code = 34  // a tenant's stored shift has no TTL
	CodeTenant         Code = 100 // tenant empty or too long
	CodeJobID          Code = 101 // job id too long or not printable ASCII
	CodeLimits         Code = 102 // the limits themselves do not validate
)

var codeText = map[Code]string{
	CodeArgCount:       "keys and arguments do not fit together",
	CodeNow:            "time out of range",
	CodeCost:           "cost out of range",
	CodeHorizon:        "horizon out of range",
	CodeRate:           "rate out of range",
	CodePeriod:         "period out of range",
	CodeBurst:          "burst out of range",
	CodeCostOverBurst:  "cost exceeds burst",
	CodeState:          "stored bucket state is malformed",
	CodeStateTTL:       "stored bucket state has no TTL",
	CodeReservation:    "stored reservation is malformed",
	CodeReservationTTL: "stored reservation has no TTL",
	CodeIncarnation:    "incarnation out of range",
	CodeOwner:          "stored owner is malformed",
	CodeOwnerTTL:       "stored owner has no TTL",
	CodeFresh:          "fresh flag out of range",
	CodeTTL:            "TTL out of range",
	CodeFailures:       "stored failure counter is malformed",
	CodeTenant:         "invalid tenant",
	CodeJobID:          "invalid job id",
	CodeLimits:         "invalid limits",
	CodeGiveUp:         "give-up count out of range",
	CodeCredits:        "stored credits are malformed",
	CodePaid:           "stored paid marker is malformed",
	CodePaidTTL:        "stored paid marker has no TTL",
	CodeOrder:          "order out of range",
	CodeAmount:         "credits out of range",
	CodeDirection:      "settle direction or credits flag unknown",
	CodeSettled:        "stored settled marker is malformed",
	CodeSettledTTL:     "stored settled marker has no TTL",
	CodeShift:          "stored shift is malformed",
	CodeShiftTTL:       "stored shift has no TTL",
}

// String describes c in a few words.
func (c Code) String() string {
	if s, ok := codeText[c]; ok {
		return s
	}
	return fmt.Sprintf("code %d", int(c))
}

// InvalidError reports input the limiter refused. Nothing was written.
type InvalidError struct {
	// Code says what was wrong.
	Code Code
	// Index is the function's ARGV or KEYS position at fault, when known.
	Index int
	// Detail adds context in words, when known.
	Detail string
}

// Error implements error.
func (e *InvalidError) Error() string {
	msg := "throttle: invalid input: " + e.Code.String()
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	if e.Index > 0 {
		msg += fmt.Sprintf(" (position %d)", e.Index)
	}
	return msg
}

// Is makes errors.Is(err, ErrInvalid) true.
func (e *InvalidError) Is(target error) bool { return target == ErrInvalid }

// RedisError wraps a failure of Redis or of the connection to it.
type RedisError struct {
	// Op is what the limiter was doing.
	Op string
	// Err is the underlying error.
	Err error
}

// Error implements error.
func (e *RedisError) Error() string { return "throttle: redis " + e.Op + ": " + e.Err.Error() }

// Unwrap returns the underlying error.
func (e *RedisError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrRedis) true.
func (e *RedisError) Is(target error) bool { return target == ErrRedis }

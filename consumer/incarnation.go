package consumer

import "github.com/throttler/throttler/fastlane/fastcopy"

// An incarnation is one message carrying a job: the original, each copy
// made by moving it, the lane's copy. The throttle records which
// incarnation of a job ran (its owner), so that only one of them runs when
// a move is interrupted between storing the copy and acking the original.

// incarnation is the incarnation of the message carrying job: its stream
// sequence as delivered, unique to the original and to every copy, even two
// copies of one move. A fast copy is the exception: its incarnation is fixed
// by the original's sequence (package fastcopy states the rule), so that the
// lane can claim the job for it before it is stored.
func incarnation(job Job) int64 {
	if job.Header.Get(fastcopy.Header) != "" {
		return fastcopy.Incarnation(job.OriginalSequence())
	}
	return fastcopy.Ordinary(job.Sequence)
}

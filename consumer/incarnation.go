package consumer

// An incarnation is one message carrying a job: the original, each copy
// made by moving it, the lane's copy. The throttle records which
// incarnation of a job ran (its owner), so that only one of them runs when
// a move is interrupted between storing the copy and acking the original.

// incarnation is the incarnation of the message carrying job: its stream
// sequence as delivered, unique to the original and to every copy, even two
// copies of one move. A stream never reaches 2^52 messages; the modulo only
// keeps the value in the throttle's range.
//
// A fast copy is the exception: its incarnation is fixed by the original's
// sequence (FastCopyIncarnation), so that the lane can claim the job for
// it before it is stored.
func incarnation(job Job) int64 {
	if job.Header.Get(HeaderFast) != "" {
		return FastCopyIncarnation(job.OriginalSequence())
	}
	return int64(job.Sequence % fastBase)
}

// fastBase starts the incarnations of fast copies: stream sequences, the
// incarnations of every other message, stay below it.
const fastBase = 1 << 52

// FastCopyIncarnation is the incarnation of the lane's copy of the job
// first stored at stream sequence seq.
func FastCopyIncarnation(seq uint64) int64 { return int64(fastBase + seq%fastBase) }

// IsFastCopy reports whether an owner record names a lane's copy.
func IsFastCopy(owner int64) bool { return owner >= fastBase }

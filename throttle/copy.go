package throttle

import "fmt"

// Copy is one incarnation of a job to decide. JobID is required: it names
// the job's owner record as well as its reservation.
type Copy struct {
	Request
	// Incarnation tells the incarnations of a job apart: a number unique to
	// the message carrying it, in [0, 2^53), such as its stream sequence.
	// The original and every copy differ, and so do two copies of one move
	// (stored twice when the move was redone after its dedup window).
	Incarnation int64
	// Fresh says this is the first delivery of the original, never decided
	// before: it holds no reservation, so its reservation is not read
	// (which saves Redis a read per job), and admitted at once it records
	// no owner (no copy of it can exist). Set it only when that is
	// certain: a fresh job that does hold a slot is charged again.
	Fresh bool
	// Order is the copy's place in its tenant's waiting list, should it
	// wait for a lease of its tenant's running cap: the job's order of
	// arrival, such as the stream sequence of its first delivery, the same
	// for every copy, so that the list keeps the order jobs arrived in
	// whichever worker decides each. 0 means the time it joins the list.
	Order int64
	// Woken says the copy was brought back in its turn under a running
	// cap (a Result.Wake): should the fleet's cap (MaxRunning) hold it
	// back, it waits at the head of the fleet's list, not behind its
	// tenant's other jobs, whose turns its tenant's cap, whose place it
	// holds, would refuse meanwhile.
	Woken bool
}

// validIncarnation reports whether inc is in [0, 2^53).
func validIncarnation(inc int64) error {
	if inc < 0 || inc >= maxExact {
		return &InvalidError{Code: CodeIncarnation, Detail: fmt.Sprintf("incarnation %d outside [0, 2^53)", inc)}
	}
	return nil
}

// jobTag validates a tenant and a job id and returns the tenant's tag.
func jobTag(k keyspace, tenant, jobID string) (string, error) {
	tag, err := k.tag(tenant)
	if err != nil {
		return "", err
	}
	if jobID == "" {
		return "", &InvalidError{Code: CodeJobID, Detail: "empty job id"}
	}
	if err := validJobID(jobID); err != nil {
		return "", err
	}
	return tag, nil
}

// ownerKey validates an incarnation of the tenant's job and returns the
// job's owner key.
func ownerKey(k keyspace, tenant, jobID string, incarnation int64) (string, error) {
	if err := validIncarnation(incarnation); err != nil {
		return "", err
	}
	tag, err := jobTag(k, tenant, jobID)
	if err != nil {
		return "", err
	}
	return k.owner(tag, jobID), nil
}

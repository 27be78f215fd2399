package throttle

import (
	"fmt"
	"strconv"
)

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

// prepare validates cp and builds the pieces of its function call.
func (d *Decider) prepare(cp Copy) (prepared, error) {
	if cp.JobID == "" {
		return prepared{}, &InvalidError{Code: CodeJobID, Detail: "a copy needs a job id"}
	}
	if err := validIncarnation(cp.Incarnation); err != nil {
		return prepared{}, err
	}
	p, err := d.l.prepare(cp.Request)
	if err != nil {
		return prepared{}, err
	}
	p.ownerKey = d.l.keys.owner(p.tag, cp.JobID)
	p.shiftKey = d.l.keys.shift(p.tag)
	p.incarnation = strconv.FormatInt(cp.Incarnation, 10)
	p.fresh = cp.Fresh
	return p, nil
}

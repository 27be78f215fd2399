package limits

import (
	"errors"

	"github.com/throttler/throttler/throttle"
)

// Reader reads keys and values of the bucket as the workers of one
// environment do. The command line checks a value with the same Reader
// before writing it, and marks a stored value the workers ignore.
type Reader struct {
	// DefaultBurst and ShadowAll read values as Spec does
	// (THROTTLER_DEFAULT_BURST, THROTTLER_SHADOW).
	DefaultBurst int64
	// ShadowAll puts every policy in shadow mode.
	ShadowAll bool
	// NoCaps refuses a value with a running cap (running:N): the
	// workers' handler cannot see when a job ends (forward).
	NoCaps bool
}

// ErrCapNeedsHTTP refuses a running cap to a worker whose handler cannot
// see when a job ends.
var ErrCapNeedsHTTP = errors.New("running:N needs THROTTLER_HANDLER=http: a forwarded job ends when it is published, so the worker cannot see how many run")

// Read checks key and reads value as a worker does: a tenant's (or
// DefaultKey's), or a level's (LevelKey), which holds only what
// throttle.Policy.ValidateShared accepts. A value it refuses is one every
// worker of the environment ignores: the tenant, or the level, keeps the
// limit it had.
func (r Reader) Read(key, value string) (throttle.Policy, error) {
	if _, ok, err := LevelKey(key); ok {
		if err != nil {
			return throttle.Policy{}, err
		}
		p, err := Spec(value, r.DefaultBurst, r.ShadowAll)
		if err != nil {
			if terr := throttle.SharedSpecError(value); terr != nil {
				return throttle.Policy{}, terr
			}
			return throttle.Policy{}, err
		}
		if err := p.ValidateShared(); err != nil {
			return throttle.Policy{}, err
		}
		return p, nil
	}
	if err := CheckKey(key); err != nil {
		return throttle.Policy{}, err
	}
	p, err := Spec(value, r.DefaultBurst, r.ShadowAll)
	if err != nil {
		return throttle.Policy{}, err
	}
	if r.NoCaps && p.Running > 0 {
		return throttle.Policy{}, ErrCapNeedsHTTP
	}
	return p, nil
}

// Package pause holds operators' pauses: a paused tenant's jobs start
// nowhere in the fleet until it is resumed (or its pause ends by itself),
// and wait off the consumer meanwhile. Pauses live in a NATS key-value
// bucket that every worker watches (Watcher into a Set), so a pause is
// applied fleet-wide within moments of being written and survives a
// restart of every worker.
//
// A key names what is paused: "tenant.<tenant>" (TenantKey). The layout
// leaves room for wider scopes (a group of tenants, "group.<name>", and the
// whole fleet, GlobalKey) once shared limits land; today only tenant keys
// are written, and a Set ignores any other key. A value is a Value in JSON.
package pause

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/throttler/throttler/tenant"
)

// GlobalKey is the key reserved for pausing the whole fleet. Nothing
// writes it yet: the key space keeps it free.
const GlobalKey = "_global"

// tenantPrefix starts a tenant's key.
const tenantPrefix = "tenant."

// TenantKey is the key that pauses tenant t.
func TenantKey(t string) string { return tenantPrefix + t }

// TenantOf returns the tenant a key pauses, and whether it is a tenant's
// key with a valid tenant.
func TenantOf(key string) (string, bool) {
	t, ok := strings.CutPrefix(key, tenantPrefix)
	if !ok || tenant.Validate(t) != nil {
		return "", false
	}
	return t, true
}

// MaxReason caps a reason's length in bytes: it travels in the header of
// every paused job's copy.
const MaxReason = 512

// Value is what a pause key holds, in JSON.
type Value struct {
	// Reason says why, for the people reading inspect and top.
	Reason string `json:"reason,omitempty"`
	// Since is when the pause was written.
	Since time.Time `json:"since"`
	// Until, when set, is when the pause ends by itself.
	Until time.Time `json:"until,omitzero"`
}

// Pause is one pause as the operations return it.
type Pause struct {
	// Key is the bucket key ("tenant.acme").
	Key string `json:"key"`
	// Tenant is the tenant it pauses.
	Tenant string `json:"tenant,omitempty"`
	// Reason, Since and Until are its Value's.
	Reason string    `json:"reason,omitempty"`
	Since  time.Time `json:"since"`
	Until  time.Time `json:"until,omitzero"`
	// Revision is the bucket revision that wrote it.
	Revision uint64 `json:"revision,omitempty"`
}

// Active reports whether p pauses at now: it has no Until, or Until is
// after now.
func (p Pause) Active(now time.Time) bool { return p.Until.IsZero() || now.Before(p.Until) }

// Encode returns v as the bucket stores it.
func (v Value) Encode() ([]byte, error) { return json.Marshal(v) }

// Decode reads a bucket value.
func Decode(data []byte) (Value, error) {
	var v Value
	if err := json.Unmarshal(data, &v); err != nil {
		return Value{}, fmt.Errorf("not a pause value: %w", err)
	}
	if v.Since.IsZero() {
		return Value{}, errors.New("not a pause value: no since")
	}
	return v, nil
}

// CheckReason reports whether a reason can be stored: at most MaxReason
// bytes of printable text (it is shown on one line and carried in
// headers).
func CheckReason(r string) error {
	if len(r) > MaxReason {
		return fmt.Errorf("reason is %d bytes, at most %d", len(r), MaxReason)
	}
	for _, c := range r {
		if c < ' ' || c == 0x7f {
			return fmt.Errorf("reason %q holds a control character", r)
		}
	}
	return nil
}

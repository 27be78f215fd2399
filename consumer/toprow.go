package consumer

// TopRow is one tenant's line of `throttler top`, as one worker knows it
// (the rows of every worker add up to the fleet's).
type TopRow struct {
	Tenant string `json:"tenant"`
	// Admitted and Deferred are jobs per second, over the last 5 s.
	Admitted float64 `json:"admitted_per_s"`
	Deferred float64 `json:"deferred_per_s"`
	// Waiting counts the jobs waiting, by how: NAK'd on the consumer,
	// moved off it for a slot, parked for a lease, paused.
	Naked  int64 `json:"nakd"`
	Moved  int64 `json:"moved"`
	Parked int64 `json:"parked"`
	Paused int64 `json:"paused"`
	// OldestWait is how long the oldest of them has waited since it was
	// first published, in seconds.
	OldestWait float64 `json:"oldest_wait_s"`
	// Binding is why the last of its jobs deferred waited: a limit, a cap,
	// a pause, a downstream's hold.
	Binding string `json:"held_by,omitempty"`
	// DeadLetters counts its jobs dead-lettered in the last hour.
	DeadLetters int64 `json:"dead_letters_1h"`
}

// Waiting is the row's jobs waiting, of every kind.
func (r TopRow) Waiting() int64 { return r.Naked + r.Moved + r.Parked + r.Paused }

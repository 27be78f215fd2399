package consumer

import "context"

// deferBatch is one group's deferrals, handed to the defer loop, and the
// fetch credits the group holds until they are settled.
type deferBatch struct {
	deferrals []Deferral
	credits   int
}

// startDeferring settles the deferrals of each batch sent on batches, in
// order, until batches is closed; done is closed after the last.
func (w *Worker) startDeferring(work context.Context) (batches chan<- deferBatch, done <-chan struct{}) {
	// Deferring runs in a goroutine of its own, one batch after the other,
	// so moving one group's jobs overlaps with deciding the next while the
	// copies are still stored in slot order.
	in := make(chan deferBatch, 4)
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		w.deferLoop(work, in)
	}()
	return in, finished
}

// deferLoop settles each batch's deferrals with the Deferrer, in order, then
// frees the batch's credits.
func (w *Worker) deferLoop(ctx context.Context, batches <-chan deferBatch) {
	for b := range batches {
		// Take every batch already waiting too: one Defer call for all of
		// them keeps more copies in flight per round trip.
		credits, ds := b.credits, b.deferrals
	more:
		for {
			select {
			case nb, ok := <-batches:
				if !ok {
					break more
				}
				credits += nb.credits
				ds = append(ds, nb.deferrals...)
			default:
				break more
			}
		}
		if len(ds) > 0 {
			w.deferrer.Defer(ctx, ds)
		}
		for _, d := range ds {
			if d.Moved {
				w.stats.Add(d.Job.Tenant, func(s *TenantStats) { s.Moved++ })
			}
			if d.Err != nil {
				w.log.Warn("deferring a job", "tenant", d.Job.Tenant, "job", d.Job.ID, "err", d.Err)
			}
		}
		w.releaseCredits(credits)
	}
}

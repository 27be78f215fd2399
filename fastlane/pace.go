package fastlane

import "time"

// paceWindow is how recent an arrival must be for the lane to count as in
// use, and Pause to cap the deferrals.
const paceWindow = time.Second

// paceSlack is how far behind its pace the deciding loop may be and still
// have the time it spent count towards it.
const paceSlack = 10 * time.Millisecond

// Pause is how long the deciding loop waits after a group of which
// deferred of decided jobs were put off, so that they are put off at no
// more than MoveRate a second while arrivals come in. A flood put off flat
// out keeps every core busy, and each step of a job taking the lane (its
// Redis call, the consumer's position, its publish, its delivery) then
// queues for a core behind it. A group mostly admitted is never paused,
// nor is any once no job has arrived for paceWindow: no job is taking the
// lane then. Only the deciding loop calls it.
func (l *Lane) Pause(deferred, decided int) time.Duration {
	now := l.cfg.Now()
	if l.cfg.MoveRate < 0 || deferred*2 <= decided || now.Sub(time.Unix(0, l.arrived.Load())) > paceWindow {
		l.paceNext = time.Time{}
		return 0
	}
	// The time spent deciding counts towards the pace, up to paceSlack: a
	// loop that was idle longer starts afresh.
	if now.Sub(l.paceNext) > paceSlack {
		l.paceNext = now
	}
	l.paceNext = l.paceNext.Add(time.Duration(deferred) * time.Second / time.Duration(l.cfg.MoveRate))
	return max(0, l.paceNext.Sub(now))
}

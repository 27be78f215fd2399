package ops

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/bundle"
	"github.com/throttler/throttler/header"
	"github.com/throttler/throttler/subject"
	"github.com/throttler/throttler/throttle"
)

// purge is one PurgeTenant run.
type purge struct {
	fl     Fleet
	opts   PurgeOptions
	stream jetstream.Stream
}

// purgeRecheck is how many deletes a purge makes between two reads of a
// consumer's position.
const purgeRecheck = 100

func newPurge(ctx context.Context, fl Fleet, opts PurgeOptions) (*purge, error) {
	s, err := fl.JetStream.Stream(ctx, fl.Stream)
	if err != nil {
		return nil, fmt.Errorf("the jobs stream %s: %w", fl.Stream, err)
	}
	return &purge{fl: fl, opts: opts, stream: s}, nil
}

// pass looks once everywhere the tenant's jobs wait, and removes what it
// finds.
func (p *purge) pass(ctx context.Context, rep *PurgeReport) error {
	t, sch := p.opts.Tenant, p.fl.Schedules
	var err error
	var inFlight int
	if rep.Pending, inFlight, err = p.delivered(ctx, p.fl.Consumer, tenantFilters(p.fl.Subjects, p.fl.TenantFrom.Token, p.fl.TenantFrom.Header == "", t)); err != nil {
		return err
	}
	rep.InFlight += inFlight
	if rep.Fast, inFlight, err = p.delivered(ctx, p.fl.FastConsumer(), []string{string(sch) + ".f." + t + ".*"}); err != nil {
		return err
	}
	rep.Charged += rep.Fast // the lane charged each copy it made
	rep.InFlight += inFlight
	if rep.Woken, inFlight, err = p.delivered(ctx, p.fl.WokenConsumer(), []string{string(sch) + ".k." + t + ".*"}); err != nil {
		return err
	}
	rep.InFlight += inFlight
	if err := p.copies(ctx, rep); err != nil {
		return err
	}
	return p.bundles(ctx, rep)
}

// position reads how far consumer name has delivered and its ack floor,
// in stream sequences, and how many messages it awaits acks for; a
// consumer that does not exist delivered nothing.
func (p *purge) position(ctx context.Context, name string) (delivered, floor uint64, ackPending int, err error) {
	c, err := p.stream.Consumer(ctx, name)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return 0, 0, 0, nil
	}
	if err != nil {
		return 0, 0, 0, fmt.Errorf("consumer %s: %w", name, err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("consumer %s: %w", name, err)
	}
	return info.Delivered.Stream, info.AckFloor.Stream, info.NumAckPending, nil
}

// delivered removes the tenant's jobs on filters that consumer name has
// not delivered yet; it counts those removed, and those delivered past
// its ack floor, left: at most the consumer's acks pending (every
// tenant's), since it does not say which of those it delivered are done.
func (p *purge) delivered(ctx context.Context, name string, filters []string) (removed, inFlight int, err error) {
	if len(filters) == 0 {
		return 0, 0, nil
	}
	last, floor, ackPending, err := p.position(ctx, name)
	if err != nil {
		return 0, 0, err
	}
	defer func() { inFlight = min(inFlight, ackPending) }()
	var seqs []uint64
	err = scan(ctx, p.stream, scanOptions{Filters: filters, From: floor + 1, HeadersOnly: true}, func(st stored) (bool, error) {
		if !p.selects(st) {
			return true, nil
		}
		if st.Seq <= last {
			inFlight++
		} else {
			seqs = append(seqs, st.Seq)
		}
		return true, nil
	})
	if err != nil || p.opts.DryRun {
		return len(seqs), inFlight, err
	}
	for i, seq := range seqs {
		if i%purgeRecheck == 0 && i > 0 {
			var more int
			if last, _, more, err = p.position(ctx, name); err != nil {
				return removed, inFlight, err
			}
			ackPending = max(ackPending, more)
		}
		if seq <= last {
			inFlight++ // delivered while the purge ran
			continue
		}
		ok, err := p.remove(ctx, seq)
		if err != nil {
			return removed, inFlight, err
		}
		if ok {
			removed++
		}
	}
	return removed, inFlight, nil
}

// copies removes the tenant's scheduled copies: moved jobs, and parked
// ones, whose places in the caps' waiting lists go too.
func (p *purge) copies(ctx context.Context, rep *PurgeReport) error {
	type found struct {
		seq     uint64
		parked  bool
		charged bool // held a slot (holdsSlot)
		id      string
		turn    *throttle.QueuedJob // parked for its turn under a level
	}
	var all []found
	filter := string(p.fl.Schedules) + "." + p.opts.Tenant + ".*"
	err := scan(ctx, p.stream, scanOptions{Filters: []string{filter}, HeadersOnly: true}, func(st stored) (bool, error) {
		if p.selects(st) {
			reason := st.Header.Get(header.WaitReason)
			f := found{seq: st.Seq, id: st.Header.Get(header.JobID), parked: strings.HasPrefix(reason, header.WaitLease), charged: holdsSlot(reason)}
			if lv, ok := strings.CutPrefix(reason, header.WaitTurn); ok {
				cost, _ := header.ParseCost(st.Header, p.fl.CostHeader) // a bad one was dead-lettered, not parked
				f.turn = &throttle.QueuedJob{Level: lv, JobID: f.id, Cost: cost}
			}
			all = append(all, f)
		}
		return true, nil
	})
	if err != nil {
		return err
	}
	var parked []string
	var turns []throttle.QueuedJob
	for _, f := range all {
		ok := true
		if !p.opts.DryRun {
			if ok, err = p.remove(ctx, f.seq); err != nil {
				return err
			}
		}
		switch {
		case !ok: // fired meanwhile: a later pass finds the job where it went
		case f.parked:
			rep.Parked++
			parked = append(parked, f.id)
		default:
			rep.Moved++
			if f.charged {
				rep.Charged++
			}
			if f.turn != nil {
				turns = append(turns, *f.turn)
			}
		}
	}
	if p.opts.DryRun {
		return nil
	}
	if p.opts.Waiting != nil && len(parked) > 0 {
		n, err := p.opts.Waiting.Unwait(ctx, p.opts.Tenant, parked)
		rep.Unwaited += n
		if err != nil {
			// The jobs are gone already; their places only cost turns.
			rep.Warnings = append(rep.Warnings, fmt.Sprintf("removing %d purged jobs from the waiting lists failed (their places are handed on when called): %v", len(parked), err))
		}
	}
	if p.opts.Levels != nil && len(turns) > 0 {
		n, err := p.opts.Levels.Unqueue(ctx, p.opts.Tenant, turns)
		rep.Unqueued += n
		if err != nil {
			rep.Warnings = append(rep.Warnings, fmt.Sprintf("removing %d purged jobs from the levels' waiting lists failed (their turns are handed on when called): %v", len(turns), err))
		}
	}
	return nil
}

// bundles removes the tenant's bundles of moved jobs, waiting or fired.
// With Before, a bundle whose jobs are not all older keeps the others:
// their scheduled copies are published, as the unbundler would, before
// the bundle goes.
func (p *purge) bundles(ctx context.Context, rep *PurgeReport) error {
	sch, t := string(p.fl.Schedules), p.opts.Tenant
	filters := []string{sch + ".b." + t + ".*", sch + ".u." + t + ".*"}
	type found struct {
		seq     uint64
		n       int
		charged int // of the n, those holding a slot (holdsSlot)
		keep    []*nats.Msg
	}
	var all []found
	err := scan(ctx, p.stream, scanOptions{Filters: filters}, func(st stored) (bool, error) {
		copies, err := bundle.Copies(st.Data)
		if err != nil {
			return true, nil // the workers dead-letter an unreadable bundle
		}
		f := found{seq: st.Seq}
		for _, c := range copies {
			if p.before(published(stored{Header: c.Header, Time: st.Time})) {
				f.n++
				if holdsSlot(c.Header.Get(header.WaitReason)) {
					f.charged++
				}
			} else {
				f.keep = append(f.keep, c)
			}
		}
		if f.n > 0 {
			all = append(all, f)
		}
		return true, nil
	})
	if err != nil {
		return err
	}
	for _, f := range all {
		if !p.opts.DryRun {
			if err := p.publish(ctx, f.keep); err != nil {
				return err
			}
			ok, err := p.remove(ctx, f.seq)
			if err != nil {
				return err
			}
			if !ok {
				continue // fired or unpacked meanwhile: a later pass finds its jobs
			}
		}
		rep.Moved += f.n
		rep.Charged += f.charged
	}
	return nil
}

// holdsSlot reports whether a moved job's wait reason says it holds a
// slot its tenant's limits were charged for, rather than waiting
// uncharged (paused, for credits, a lease or a turn).
func holdsSlot(reason string) bool {
	return strings.HasPrefix(reason, header.WaitLimit) || reason == header.WaitSlot
}

// publish stores copies and waits for the acks.
func (p *purge) publish(ctx context.Context, copies []*nats.Msg) error {
	for _, c := range copies {
		if _, err := p.fl.JetStream.PublishMsg(ctx, c); err != nil {
			return fmt.Errorf("keeping a bundled job of %s: %w", p.opts.Tenant, err)
		}
	}
	return nil
}

// remove deletes the message at seq, and reports false when it was gone.
func (p *purge) remove(ctx context.Context, seq uint64) (bool, error) {
	err := p.stream.DeleteMsg(ctx, seq)
	if err == nil {
		return true, nil
	}
	if gone(err) {
		return false, nil
	}
	return false, fmt.Errorf("removing message %d of %s: %w", seq, p.fl.Stream, err)
}

// selects reports whether the message is a job of the tenant that the
// options select.
func (p *purge) selects(st stored) bool {
	subj := st.Subject
	if st.Header.Get(header.JobID) != "" && st.Header.Get(header.Subject) != "" {
		subj = st.Header.Get(header.Subject)
	}
	t, err := p.fl.TenantFrom.Of(subj, st.Header)
	return err == nil && t == p.opts.Tenant && p.before(published(st))
}

// before reports whether a job first published at t is old enough.
func (p *purge) before(t time.Time) bool {
	return p.opts.Before.IsZero() || t.Before(p.opts.Before)
}

// published is when a job was first published: its HeaderPublished, else
// when the stream stored it.
func published(st stored) time.Time {
	if ts, err := time.Parse(time.RFC3339Nano, st.Header.Get(header.Published)); err == nil {
		return ts
	}
	return st.Time
}

// tenantFilters narrows the job subjects to those that can hold tenant's
// jobs, when the tenant is the token-th subject token (byToken); each
// message found is still checked.
func tenantFilters(subjects []string, token int, byToken bool, tenant string) []string {
	if !byToken {
		return subjects
	}
	var out []string
	for _, s := range subjects {
		toks := strings.Split(s, ".")
		i := token - 1
		wide := -1 // index of a '>'
		for k, tk := range toks {
			if tk == ">" {
				wide = k
			}
		}
		switch {
		case wide >= 0 && wide < i:
			out = append(out, s) // the token is somewhere under the '>'
		case wide == i:
			pre := strings.Join(append(append([]string(nil), toks[:i]...), tenant), ".")
			out = append(out, pre, pre+".>")
		case i >= len(toks):
			// no subject of this pattern has the token
		case toks[i] == "*":
			toks[i] = tenant
			out = append(out, strings.Join(toks, "."))
		case toks[i] == tenant:
			out = append(out, s)
		}
	}
	// A consumer refuses filters that overlap: keep those no other covers.
	var kept []string
	for k, f := range out {
		covered := slices.ContainsFunc(out, func(g string) bool { return g != f && subject.Covers(g, f) }) ||
			slices.Contains(out[:k], f)
		if !covered {
			kept = append(kept, f)
		}
	}
	return kept
}

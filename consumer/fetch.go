package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/throttle"
)

// start pulls from the jobs consumer, from the woken jobs' consumer and,
// with a fast lane, from the consumer of the lane's copies, until ctx is
// cancelled; a lane's copy the lane admitted starts at once, without
// waiting for a group (preAdmitted, with work the settling's context). The
// messages come out on msgs, which is closed once every pull has ended;
// fetchErr then says why the jobs consumer's pulling ended.
func (p *puller) start(ctx, work context.Context) (msgs <-chan jetstream.Msg, fetchErr func() error) {
	out := make(chan jetstream.Msg, p.cfg.FetchBatch)
	var pulls sync.WaitGroup
	var err error
	pulls.Add(1)
	go func() {
		defer pulls.Done()
		err = p.fetchLoop(ctx, p.cons, p.cfg.FetchBatch, out, nil)
	}()
	if p.copies != nil {
		// The lane's copies are few: small pulls, from the same credits.
		direct := func(m jetstream.Msg) bool { return p.preAdmitted(ctx, work, m) }
		pulls.Add(1)
		go func() {
			defer pulls.Done()
			_ = p.fetchLoop(ctx, p.copies, min(8, p.cfg.FetchBatch), out, direct)
		}()
	}
	if p.woken != nil {
		// Woken jobs are few, and each holds its tenant's turn: small
		// pulls, from the same credits, past the jobs consumer's backlog.
		pulls.Add(1)
		go func() {
			defer pulls.Done()
			_ = p.fetchLoop(ctx, p.woken, min(8, p.cfg.FetchBatch), out, nil)
		}()
	}
	done := make(chan struct{})
	go func() {
		pulls.Wait()
		p.settingUp.Wait()
		close(out)
		close(done)
	}()
	return out, func() error { <-done; return err }
}

// puller pulls messages from the consumers into the worker, within the
// fetch credits, and sets the consumer up again when it is gone.
type puller struct {
	cons   jetstream.Consumer // the jobs consumer
	woken  jetstream.Consumer // the woken jobs' consumer, nil without one
	copies jetstream.Consumer // the fast lane's copies' consumer, nil without a lane
	// preAdmitted starts a lane's copy the lane admitted, and reports
	// whether it did (laneAdapter.startPreAdmitted).
	preAdmitted func(ctx, work context.Context, m jetstream.Msg) bool
	credits     chan struct{}               // one token per message pulled and not yet dispatched
	pulled      *pulledMsgs                 // the worker's: pulled messages are kept alive until acted on
	recreate    func(context.Context) error // nil without one
	recreating  sync.Mutex                  // one recreate at a time (see recreateIfGone)
	settingUp   sync.WaitGroup              // the recreate under way, which start waits for
	cfg         Config
	log         *slog.Logger
}

// sidePulls is how many pull loops run beside the jobs consumer's at
// most: the lane's copies and the woken jobs. Each holds a credit while
// its pull waits for messages that may not come (up to its expiry), so
// each has one credit more than the jobs consumer's: with a fetch batch
// of 1 they would otherwise hold every credit and leave the jobs waiting.
const sidePulls = 2

// newPuller returns a puller of p's consumers with 2×FetchBatch +
// sidePulls credits, adding to pulled.
func newPuller(p Params, cfg Config, pulled *pulledMsgs) *puller {
	pl := &puller{cons: p.Consumer, woken: p.Woken, credits: make(chan struct{}, 2*cfg.FetchBatch+sidePulls),
		pulled: pulled, recreate: p.Recreate, cfg: cfg, log: cfg.Logger}
	if p.Lane != nil {
		pl.copies = p.Lane.Copies()
	}
	return pl
}

// now reads the worker's clock.
func (p *puller) now() time.Time { return p.cfg.Now() }

// fetchLoop pulls messages from cons, up to batch at a time, and sends
// them to msgs until ctx is cancelled; direct, when set, may take a message
// instead (it reports whether it did). It holds one credit per message
// pulled and not yet dispatched, at most 2×FetchBatch + sidePulls for all
// its loops, so the worker never has more than that many messages
// delivered and undecided: they count against the consumer's
// MaxAckPending.
func (p *puller) fetchLoop(ctx context.Context, cons jetstream.Consumer, batch int, msgs chan<- jetstream.Msg, direct func(jetstream.Msg) bool) error {
	// A failed pull costs the server nothing ("no responders" comes back
	// at once; a pull waits at most maxPullExpiry), so the retries stay
	// within a second of each other: a cluster's election over, pulling
	// resumes within a second.
	bo := backoff.NewExponentialBackOff(backoff.WithInitialInterval(100*time.Millisecond),
		backoff.WithMaxInterval(time.Second), backoff.WithMaxElapsedTime(0))
	for {
		// Wait for one credit, then take as many more as are free.
		select {
		case p.credits <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		n := 1
		for n < batch && p.takeCredit() {
			n++
		}
		got, err := p.fetch(ctx, cons, n, msgs, direct)
		p.releaseCredits(n - got)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			wait := bo.NextBackOff()
			p.log.Warn("pull failed; retrying", "err", err, "retry_in", wait)
			p.recreateIfGone(ctx, err)
			if !sleep(ctx, wait) {
				return ctx.Err()
			}
			continue
		}
		bo.Reset()
	}
}

// fetch pulls up to n messages from cons into msgs (or to direct, which
// may take them) and returns how many it pulled. The pull is not cancelled
// by shutdown: cancelling it would drop the messages the server has
// already sent to it, which would then wait out AckWait. Instead it runs
// to its short expiry and every message it brings reaches Run, which
// hands it back.
func (p *puller) fetch(ctx context.Context, cons jetstream.Consumer, n int, msgs chan<- jetstream.Msg, direct func(jetstream.Msg) bool) (int, error) {
	expiry := min(maxPullExpiry, max(50*time.Millisecond, p.cfg.ShutdownTimeout/4))
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), expiry)
	defer cancel()
	batch, err := cons.Fetch(n, jetstream.FetchContext(fctx))
	if err != nil {
		return 0, fmt.Errorf("fetch: %w", err)
	}
	got := 0
	for msg := range batch.Messages() {
		if direct != nil && direct(msg) {
			got++
			p.releaseCredits(1)
			continue
		}
		p.pulled.add(msg, p.now()) // kept alive until acted on
		msgs <- msg                // the lifecycle hands back what it will not start
		got++
	}
	if err := batch.Error(); err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) && !errors.Is(err, jetstream.ErrNoMessages) {
		return got, fmt.Errorf("fetch: %w", err)
	}
	return got, nil
}

// maxPullExpiry bounds one pull request. Shutdown waits for the pull under
// way to end, so keep it short: a quarter of the shutdown timeout at most.
const maxPullExpiry = time.Second

// takeCredit takes a fetch credit if one is free.
func (p *puller) takeCredit() bool {
	select {
	case p.credits <- struct{}{}:
		return true
	default:
		return false
	}
}

// releaseCredits gives back n fetch credits.
func (p *puller) releaseCredits(n int) {
	for i := 0; i < n; i++ {
		<-p.credits
	}
}

// actedOn takes msg off the pulled messages: the worker acts on it now
// (settles it, defers it or starts it).
func (p *puller) actedOn(msg jetstream.Msg) { p.pulled.remove(msg) }

// take hands back a job the throttle did not decide because the worker
// is stopping and cut the decision short.
func (p *puller) take(_ *groupActs, it *item, _ throttle.Result) bool {
	p.handBack([]jetstream.Msg{it.msg})
	return true
}

// handBack returns messages that will not be started to JetStream for
// immediate redelivery.
func (p *puller) handBack(group []jetstream.Msg) {
	for _, m := range group {
		p.pulled.remove(m)
		if err := m.Nak(); err != nil {
			p.log.Warn("hand back failed; JetStream redelivers after AckWait", "err", err)
		}
	}
}

// recreateIfGone sets up the stream and consumers again when err, from a
// pull, says the consumer is gone: deleted, or no one answers for it (as
// also during a cluster's election, when setting up changes nothing). It
// does so in the background, and the pulls go on meanwhile: in an
// election, a consumer's creation waits for the cluster's metadata leader
// while the consumer's own leader, elected sooner, already serves pulls.
// The worker's pulling loops all see the error at once; one of them sets
// things up and the others go on pulling, since a stream update at the
// same time as a consumer's creation races inside nats-server 2.15.2
// (fileStore.UpdateConfig against fileStore.ConsumerStore, caught by the
// race detector).
func (p *puller) recreateIfGone(ctx context.Context, err error) {
	gone := errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrConsumerNotFound)
	if p.recreate == nil || !(gone || errors.Is(err, nats.ErrNoResponders)) || !p.recreating.TryLock() {
		return
	}
	p.settingUp.Add(1)
	go func() {
		defer p.settingUp.Done()
		defer p.recreating.Unlock()
		if rerr := p.recreate(ctx); rerr != nil {
			if ctx.Err() == nil {
				p.log.Warn("setting up the stream and consumers again failed; retrying", "err", rerr)
			}
			return
		}
		if gone {
			p.log.Warn("the consumer was gone; set it up again", "err", err)
			return
		}
		p.log.Warn("no server answered a pull; the stream and consumers are set up again where missing", "err", err)
	}()
}

// pulledMsgs are the messages a worker has pulled and not yet acted on,
// with when each was pulled: the puller adds each message it pulls and
// takes off each it hands back; the keep-alive keeps them alive. Safe for
// concurrent use; the zero value is ready.
type pulledMsgs struct {
	mu   sync.Mutex
	msgs map[jetstream.Msg]time.Time
}

// add records msg as pulled at at.
func (h *pulledMsgs) add(msg jetstream.Msg, at time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.msgs == nil {
		h.msgs = make(map[jetstream.Msg]time.Time)
	}
	h.msgs[msg] = at
}

// remove forgets msg.
func (h *pulledMsgs) remove(msg jetstream.Msg) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.msgs, msg)
}

// count is how many messages are pulled and not yet acted on.
func (h *pulledMsgs) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.msgs)
}

// pulledBy returns the messages pulled at or before t.
func (h *pulledMsgs) pulledBy(t time.Time) []jetstream.Msg {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []jetstream.Msg
	for msg, at := range h.msgs {
		if !at.After(t) {
			out = append(out, msg)
		}
	}
	return out
}

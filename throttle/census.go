package throttle

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Census keeps the fleet's counts of waiting jobs in Redis, where every
// worker reads them: one worker at a time (the counter, holding a short
// lease) counts, the others read what it wrote. It counts the jobs
// waiting under running caps from the caps' waiting lists (one ZCARD per
// cap that parked a job lately, not one read per job), and sums the jobs
// each worker holds in hand, so that the NAK'd ones can be told from
// them. Safe for concurrent use.
//
// Its keys share the fleet's cap's hash tag:
//
//	<prefix>:{~}:census:parkers   set of the tenants that parked jobs lately
//	<prefix>:{~}:census:queuers   set of the shared levels that queued jobs lately
//	<prefix>:{~}:census:hands     hash worker → "jobs in hand, unix ms"
//	<prefix>:{~}:census:counts    hash kind → jobs, and "at" (unix ms)
//	<prefix>:{~}:census:counter   the counter's lease: its worker's id
//
// Every write renews its key's TTL (censusTTL), and the counter renews
// the sets it reads: the keys go with the fleet, a day after its last
// worker stopped.
type Census struct {
	rdb  Client
	keys keyspace
}

// Census returns the Census of l's fleet (same Redis, same key prefix).
func (l *Limiter) Census() *Census { return &Census{rdb: l.lib.rdb, keys: l.keys} }

// censusTTL is how long the Census' keys outlive the fleet's last write.
const censusTTL = 24 * time.Hour

// censusKey names one of the Census' keys.
func (k keyspace) censusKey(name string) string {
	return k.prefix + ":" + fleetTag + ":census:" + name
}

// NoteParked records that tenant ("" for the fleet's cap) parked jobs, so
// that the counter reads its cap's waiting list. A worker calls it once in
// a while per tenant, not per job.
func (c *Census) NoteParked(ctx context.Context, tenants []string) error {
	if len(tenants) == 0 {
		return nil
	}
	members := make([]any, 0, len(tenants))
	for _, t := range tenants {
		if t != "" {
			members = append(members, t)
		}
	}
	if len(members) == 0 {
		return nil // the fleet's waiting list is always read
	}
	pipe := c.rdb.Pipeline()
	pipe.SAdd(ctx, c.keys.censusKey("parkers"), members...)
	pipe.PExpire(ctx, c.keys.censusKey("parkers"), censusTTL)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("throttle: noting parked tenants: %w", err)
	}
	return nil
}

// Parked counts the jobs in the waiting lists of the fleet's cap and of
// every tenant noted as parking, and forgets the tenants whose list is
// empty (they are noted again when they park again).
func (c *Census) Parked(ctx context.Context) (int64, error) {
	pipe := c.rdb.Pipeline()
	members := pipe.SMembers(ctx, c.keys.censusKey("parkers"))
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, fmt.Errorf("throttle: reading parked tenants: %w", err)
	}
	tenants := append([]string{""}, members.Val()...)
	pipe = c.rdb.Pipeline()
	cards := make([]*redis.IntCmd, len(tenants))
	for i, t := range tenants {
		_, queue, err := c.keys.capKeys(t)
		if err != nil {
			return 0, err
		}
		cards[i] = pipe.ZCard(ctx, queue)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return 0, fmt.Errorf("throttle: counting parked jobs: %w", err)
	}
	var n int64
	var empty []any
	for i, card := range cards {
		n += card.Val()
		if i > 0 && card.Val() == 0 {
			empty = append(empty, tenants[i])
		}
	}
	// The tenants still parking keep their set alive while they do, noted
	// again or not.
	pipe = c.rdb.Pipeline()
	if len(empty) > 0 {
		pipe.SRem(ctx, c.keys.censusKey("parkers"), empty...)
	}
	if len(tenants)-1 > len(empty) {
		pipe.PExpire(ctx, c.keys.censusKey("parkers"), censusTTL)
	}
	if pipe.Len() > 0 {
		if _, err := pipe.Exec(ctx); err != nil {
			return 0, fmt.Errorf("throttle: forgetting tenants without parked jobs: %w", err)
		}
	}
	return n, nil
}

// ReportInHand records that worker holds n jobs delivered and not yet
// acked or handed back, at the worker's time at.
func (c *Census) ReportInHand(ctx context.Context, worker string, n int, at time.Time) error {
	pipe := c.rdb.Pipeline()
	pipe.HSet(ctx, c.keys.censusKey("hands"), worker, strconv.Itoa(n)+" "+strconv.FormatInt(at.UnixMilli(), 10))
	pipe.PExpire(ctx, c.keys.censusKey("hands"), censusTTL)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("throttle: reporting jobs in hand: %w", err)
	}
	return nil
}

// InHand sums the jobs in the workers' hands as reported since since, and
// forgets the reports older than that (workers gone).
func (c *Census) InHand(ctx context.Context, since time.Time) (int64, error) {
	key := c.keys.censusKey("hands")
	pipe := c.rdb.Pipeline()
	all := pipe.HGetAll(ctx, key)
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, fmt.Errorf("throttle: reading jobs in hand: %w", err)
	}
	var n int64
	var stale []string
	for worker, v := range all.Val() {
		count, ms, ok := strings.Cut(v, " ")
		k, err1 := strconv.ParseInt(count, 10, 64)
		at, err2 := strconv.ParseInt(ms, 10, 64)
		if !ok || err1 != nil || err2 != nil || time.UnixMilli(at).Before(since) {
			stale = append(stale, worker)
			continue
		}
		n += k
	}
	if len(stale) > 0 {
		pipe = c.rdb.Pipeline()
		pipe.HDel(ctx, key, stale...)
		if _, err := pipe.Exec(ctx); err != nil {
			return 0, fmt.Errorf("throttle: forgetting old reports of jobs in hand: %w", err)
		}
	}
	return n, nil
}

// TakeCounter makes worker the counter for ttl if no other worker is, or
// extends its term if it is; it reports whether worker counts. Two
// workers may both count for a moment when a term ends as it is
// extended: they write the same counts.
func (c *Census) TakeCounter(ctx context.Context, worker string, ttl time.Duration) (bool, error) {
	key := c.keys.censusKey("counter")
	pipe := c.rdb.Pipeline()
	set := pipe.SetNX(ctx, key, worker, ttl)
	get := pipe.Get(ctx, key)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return false, fmt.Errorf("throttle: taking the census counter: %w", err)
	}
	if set.Val() {
		return true, nil
	}
	if get.Val() != worker {
		return false, nil
	}
	pipe = c.rdb.Pipeline()
	pipe.PExpire(ctx, key, ttl)
	if _, err := pipe.Exec(ctx); err != nil {
		return false, fmt.Errorf("throttle: extending the census counter: %w", err)
	}
	return true, nil
}

// Publish writes the counts by kind, counted at at: every kind the
// counter knows, each time, as no kind left out is cleared.
func (c *Census) Publish(ctx context.Context, counts map[string]int64, at time.Time) error {
	fields := make([]any, 0, 2*len(counts)+2)
	for kind, n := range counts {
		fields = append(fields, kind, n)
	}
	fields = append(fields, "at", at.UnixMilli())
	// The counter writes every kind each time (0 included), so no kind
	// keeps an old value; the counts go with the fleet (a day without a
	// counter).
	key := c.keys.censusKey("counts")
	pipe := c.rdb.Pipeline()
	pipe.HSet(ctx, key, fields...)
	pipe.PExpire(ctx, key, censusTTL)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("throttle: publishing the counts of waiting jobs: %w", err)
	}
	return nil
}

// Counts reads the counts by kind the counter last wrote, and when it
// counted them (zero when none was written).
func (c *Census) Counts(ctx context.Context) (map[string]int64, time.Time, error) {
	pipe := c.rdb.Pipeline()
	all := pipe.HGetAll(ctx, c.keys.censusKey("counts"))
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, time.Time{}, fmt.Errorf("throttle: reading the counts of waiting jobs: %w", err)
	}
	counts := map[string]int64{}
	var at time.Time
	for k, v := range all.Val() {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, time.Time{}, fmt.Errorf("throttle: the counts of waiting jobs: %s is %q", k, v)
		}
		if k == "at" {
			at = time.UnixMilli(n)
			continue
		}
		counts[k] = n
	}
	return counts, at, nil
}

package throttle

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/throttler/throttler/lua"
)

// Client is the part of a go-redis client the engine needs. *redis.Client,
// *redis.ClusterClient and *redis.Ring all satisfy it. A client that also
// has ForEachMaster (a Cluster) or ForEachShard (a Ring) gets the library
// loaded on every master or shard.
type Client interface {
	// Pipeline starts a pipeline: the engine sends every batch in one.
	Pipeline() redis.Pipeliner
	// FCall calls a Redis function.
	FCall(ctx context.Context, function string, keys []string, args ...any) *redis.Cmd
	// FunctionLoadReplace loads (or replaces) a Redis Functions library.
	FunctionLoadReplace(ctx context.Context, code string) *redis.StringCmd
}

// masters is a Client spread over the masters of a Redis Cluster.
type masters interface {
	ForEachMaster(ctx context.Context, fn func(ctx context.Context, client *redis.Client) error) error
}

// shards is a Client spread over the shards of a Redis Ring.
type shards interface {
	ForEachShard(ctx context.Context, fn func(ctx context.Context, client *redis.Client) error) error
}

// library is the engine's Redis Functions library (package lua) as one
// version of the engine loads and calls it. Its library and function names
// carry a hash of its source, so that two versions of the worker running
// side by side during a rolling upgrade never replace each other's
// functions. Whether two versions share buckets depends on their key
// formats, which docs/operations.md lists per upgrade.
type library struct {
	rdb     Client
	version string
	code    string // the source, with the version put in
	// The functions' names.
	decide, claim, release, failed, carry, hold, admit, lease string
	credits, refund, balance, settle                          string
	share, unshare, unqueue                                   string
}

// newLibrary returns the library for rdb.
func newLibrary(rdb Client) *library {
	// The hash covers the bounds too: two builds that differ only in a
	// bound must not share function names.
	sum := sha256.Sum256([]byte(lua.Source(lua.Version)))
	v := hex.EncodeToString(sum[:5])
	name := func(fn string) string { return fn + "_" + v }
	return &library{
		rdb:     rdb,
		version: v,
		code:    lua.Source(v),
		decide:  name("decide"),
		claim:   name("claim"),
		release: name("release"),
		failed:  name("failed"),
		carry:   name("carry"),
		hold:    name("hold"),
		admit:   name("admit"),
		lease:   name("lease"),
		credits: name("credits"),
		refund:  name("refund"),
		balance: name("balance"),
		settle:  name("settle"),
		share:   name("share"),
		unshare: name("unshare"),
		unqueue: name("unqueue"),
	}
}

// load loads the library with FUNCTION LOAD REPLACE on every master of a
// Redis Cluster, every shard of a Ring, or the one server.
func (lib *library) load(ctx context.Context) error {
	loadOn := func(ctx context.Context, c *redis.Client) error {
		if err := c.FunctionLoadReplace(ctx, lib.code).Err(); err != nil {
			return fmt.Errorf("FUNCTION LOAD on %s: %w", c.Options().Addr, err)
		}
		return nil
	}
	var err error
	switch c := lib.rdb.(type) {
	case masters:
		err = c.ForEachMaster(ctx, loadOn)
	case shards:
		err = c.ForEachShard(ctx, loadOn)
	default:
		err = lib.rdb.FunctionLoadReplace(ctx, lib.code).Err()
	}
	if err != nil {
		return &RedisError{Op: "loading the functions", Err: err}
	}
	return nil
}

// fcall is one function call, sent in a pipeline.
type fcall struct {
	fn   string
	keys []string
	args []any
	cmd  *redis.Cmd
}

// reloads is how many times run loads the library again on a Cluster or
// Ring and re-sends the calls that found it missing, should it vanish again
// in between (a FUNCTION FLUSH racing the retry).
const reloads = 3

// run sends calls in one pipeline. Calls that failed because Redis does not
// have the function (after a restart without persistence, FUNCTION FLUSH,
// or a new master) did not run: the library is loaded again and they are
// sent again, in one more round trip (on a single server, in the same
// transaction as the load). Errors are left in each call's cmd.
func (lib *library) run(ctx context.Context, calls []fcall) {
	if len(calls) == 0 {
		return
	}
	pipe := lib.rdb.Pipeline()
	for k := range calls {
		calls[k].cmd = pipe.FCall(ctx, calls[k].fn, calls[k].keys, calls[k].args...)
	}
	_, _ = pipe.Exec(ctx) // errors are read per command
	if single, ok := lib.rdb.(*redis.Client); ok {
		// One server: load the library and send the calls again in one
		// transaction, so that nothing can delete it in between.
		var tx redis.Pipeliner
		for k := range calls {
			if !isMissingFunction(calls[k].cmd.Err()) {
				continue
			}
			if tx == nil {
				tx = single.TxPipeline()
				tx.FunctionLoadReplace(ctx, lib.code)
			}
			calls[k].cmd = tx.FCall(ctx, calls[k].fn, calls[k].keys, calls[k].args...)
		}
		if tx != nil {
			_, _ = tx.Exec(ctx)
		}
		return
	}
	for range reloads {
		var retry redis.Pipeliner
		for k := range calls {
			if !isMissingFunction(calls[k].cmd.Err()) {
				continue
			}
			if retry == nil {
				if err := lib.load(ctx); err != nil {
					return // the calls keep their error
				}
				retry = lib.rdb.Pipeline()
			}
			calls[k].cmd = retry.FCall(ctx, calls[k].fn, calls[k].keys, calls[k].args...)
		}
		if retry == nil {
			return
		}
		_, _ = retry.Exec(ctx)
	}
}

// call runs one function call, as run does.
func (lib *library) call(ctx context.Context, fn string, keys []string, args ...any) ([]int64, error) {
	c := []fcall{{fn: fn, keys: keys, args: args}}
	lib.run(ctx, c)
	return replyInts(c[0].cmd, fn, 4)
}

// isMissingFunction reports whether err is Redis' answer to an FCALL of a
// function it does not have.
func isMissingFunction(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && strings.Contains(err.Error(), "Function not found")
}

// replyInts reads the reply of a call of fn, which must be n integers
// (checking the type of each). An error reply of the BADCALL kind (a call
// whose KEYS and ARGV do not fit together) is an InvalidError; any other
// error a RedisError.
func replyInts(cmd *redis.Cmd, fn string, n int) ([]int64, error) {
	v, err := cmd.Result()
	if err != nil {
		if redis.HasErrorPrefix(err, "BADCALL") {
			return nil, &InvalidError{Code: CodeArgCount, Detail: err.Error()}
		}
		return nil, &RedisError{Op: "FCALL " + fn, Err: err}
	}
	arr, ok := v.([]any)
	if !ok || len(arr) != n {
		return nil, &RedisError{Op: "FCALL " + fn, Err: fmt.Errorf("reply %#v, want %d integers", v, n)}
	}
	out := make([]int64, n)
	for i, e := range arr {
		x, ok := e.(int64)
		if !ok {
			return nil, &RedisError{Op: "FCALL " + fn, Err: fmt.Errorf("reply element %d is %T, want an integer", i, e)}
		}
		out[i] = x
	}
	return out, nil
}

// Reply statuses of decide and the other functions; see lua/head.lua.
const (
	statusAdmitted  = 1
	statusLimited   = 2
	statusInvalid   = 3
	statusDuplicate = 4
	statusWrongType = 5
)

// replyStatus reads the status of a reply of one of the functions outside
// decide (claim, release, carry, hold, lease): nil when it did its work,
// else the error its status names; key is the key named in a WRONGTYPE
// error.
func replyStatus(fn, key string, v []int64) error {
	switch v[0] {
	case statusAdmitted:
		return nil
	case statusInvalid:
		return &InvalidError{Code: Code(v[1]), Index: int(v[2])}
	case statusWrongType:
		return &RedisError{Op: "FCALL " + fn, Err: fmt.Errorf("WRONGTYPE key %s holds another type than a string", key)}
	}
	return &RedisError{Op: "FCALL " + fn, Err: fmt.Errorf("unexpected reply %v", v)}
}

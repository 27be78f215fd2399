package config

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/redis/go-redis/v9"
)

// RedisMode says what REDIS_URL names.
type RedisMode string

// The values of THROTTLER_REDIS_MODE. Each reads REDIS_URL as go-redis's
// own parser for that kind of client does, so that every form and query
// option go-redis documents works, user, password and rediss:// (TLS)
// included.
const (
	// RedisSingle is one server: redis://[user:password@]host:port[/db],
	// as redis.ParseURL reads it.
	RedisSingle RedisMode = "single"
	// RedisCluster is a Redis Cluster given by one or more of its nodes:
	// redis://[user:password@]h1:6379?addr=h2:6379&addr=h3:6379, as
	// redis.ParseClusterURL reads it.
	RedisCluster RedisMode = "cluster"
	// RedisSentinel is a master found through Redis Sentinel:
	// redis://[suser:spassword@]s1:26379[/db]?master_name=NAME&addr=s2:26379,
	// as redis.ParseFailoverURL reads it. The user info is the sentinels'
	// login; the master's is ?username=…&password=….
	RedisSentinel RedisMode = "sentinel"
)

// redisWant says what REDIS_URL accepts in mode.
func redisWant(mode RedisMode) string {
	switch mode {
	case RedisCluster:
		return "must be a redis:// or rediss:// URL of cluster nodes such as redis://user:password@h1:6379?addr=h2:6379&addr=h3:6379"
	case RedisSentinel:
		return "must be a redis:// or rediss:// URL of sentinels such as redis://s1:26379/0?master_name=mymaster&addr=s2:26379&password=secret"
	}
	return "must be a redis:// or rediss:// URL such as redis://user:password@host:6379/0"
}

// redis checks THROTTLER_REDIS_MODE and REDIS_URL read in that mode, and
// returns the addresses the URL names (nil when it has a problem).
func (ck *checker) redis(mode RedisMode, s string) []string {
	const name = "REDIS_URL"
	ck.oneOf("THROTTLER_REDIS_MODE", string(mode), string(RedisSingle), string(RedisCluster), string(RedisSentinel))
	want := redisWant(mode)
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "redis" && u.Scheme != "rediss") || u.Hostname() == "" {
		// Never echo err: url.Parse errors quote the URL, password included.
		ck.addf(name, "%s, got %q", want, maskRedisURL(s))
		return nil
	}
	switch mode {
	case RedisSingle, RedisCluster, RedisSentinel:
	default:
		return nil // which of its forms REDIS_URL should take is unknown
	}
	var addrs []string
	switch mode {
	case RedisSingle:
		var o *redis.Options
		if o, err = redis.ParseURL(s); err == nil {
			addrs = []string{o.Addr}
		}
	case RedisCluster:
		var o *redis.ClusterOptions
		if o, err = redis.ParseClusterURL(s); err == nil {
			addrs = o.Addrs
			// ParseClusterURL ignores a path: say so rather than use
			// database 0 when another was asked for.
			if db := strings.Trim(u.Path, "/"); db != "" && db != "0" {
				ck.addf(name, "%s: a Redis Cluster has only database 0, got %q", want, maskRedisURL(s))
				return nil
			}
		}
	case RedisSentinel:
		var o *redis.FailoverOptions
		if o, err = redis.ParseFailoverURL(s); err == nil {
			addrs = o.SentinelAddrs
			if o.MasterName == "" {
				ck.addf(name, "%s: master_name=NAME, the master the sentinels watch, is missing, got %q", want, maskRedisURL(s))
				return nil
			}
		}
	}
	if err != nil {
		ck.addf(name, "%s (%v%s), got %q", want, err, modeHint(mode, u.Query()), maskRedisURL(s))
		return nil
	}
	for _, a := range addrs {
		if !dialAddrOK(a) {
			ck.addf(name, "%s: %q is not a host and a port from 1 to 65535, got %q", want, a, maskRedisURL(s))
			return nil
		}
	}
	return addrs
}

// modeHint points at THROTTLER_REDIS_MODE when a URL go-redis refused in
// mode has the options of another mode.
func modeHint(mode RedisMode, q url.Values) string {
	switch {
	case mode != RedisSentinel && q.Has("master_name"):
		return "; master_name= is for THROTTLER_REDIS_MODE=sentinel"
	case mode == RedisSingle && q.Has("addr"):
		return "; addr= lists the nodes of a cluster or the sentinels: set THROTTLER_REDIS_MODE=cluster or sentinel"
	}
	return ""
}

// redisSummary describes, for Print, what c connects to: the mode, the
// addresses and, in sentinel mode, the master. It holds no secret.
func (c *Config) redisSummary() string {
	tls := ""
	if strings.HasPrefix(c.RedisURL, "rediss:") {
		tls = ", TLS"
	}
	addrs := strings.Join(c.RedisAddrs, " ")
	switch c.RedisMode {
	case RedisCluster:
		return fmt.Sprintf("cluster, seed nodes %s%s", addrs, tls)
	case RedisSentinel:
		if o, err := redis.ParseFailoverURL(c.RedisURL); err == nil {
			return fmt.Sprintf("sentinel, master %q, sentinels %s%s", o.MasterName, addrs, tls)
		}
	}
	return fmt.Sprintf("%s, server %s%s", c.RedisMode, addrs, tls)
}

package config

import (
	"bytes"
	"slices"
	"strings"
	"testing"
)

func TestRedisModes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		mode, url string
		addrs     []string // want these, and no problem
		problem   string   // or a problem of this variable ...
		says      string   // ... saying this
	}{
		{mode: "", url: "redis://h:6379/2", addrs: []string{"h:6379"}},
		{mode: "single", url: "rediss://app:pw@h:6380/1", addrs: []string{"h:6380"}},
		{mode: "single", url: "redis://h1:6379?addr=h2:6379", problem: "REDIS_URL", says: "set THROTTLER_REDIS_MODE=cluster or sentinel"},
		{mode: "single", url: "redis://h1:6379?master_name=m", problem: "REDIS_URL", says: "master_name= is for THROTTLER_REDIS_MODE=sentinel"},
		{mode: "cluster", url: "redis://app:pw@h1:6379?addr=h2:6379&addr=h3:6379", addrs: []string{"h1:6379", "h2:6379", "h3:6379"}},
		{mode: "cluster", url: "rediss://h1:6379", addrs: []string{"h1:6379"}},
		{mode: "cluster", url: "redis://h1:6379/3", problem: "REDIS_URL", says: "only database 0"},
		{mode: "cluster", url: "redis://h1:6379?master_name=m", problem: "REDIS_URL", says: "THROTTLER_REDIS_MODE=sentinel"},
		{mode: "cluster", url: "redis://h1:6379?addr=nohost", problem: "REDIS_URL", says: "addr"},
		{mode: "cluster", url: "http://h1:6379", problem: "REDIS_URL", says: "URL of cluster nodes"},
		{mode: "sentinel", url: "redis://s1:26379/1?master_name=m&addr=s2:26379&password=pw", addrs: []string{"s1:26379", "s2:26379"}},
		{mode: "sentinel", url: "rediss://su:sp@s1:26379?master_name=m", addrs: []string{"s1:26379"}},
		{mode: "sentinel", url: "redis://s1:26379?addr=s2:26379", problem: "REDIS_URL", says: "master_name=NAME"},
		{mode: "sentinel", url: "redis://s1:26379?master_name=m&bogus=1", problem: "REDIS_URL", says: "unexpected option: bogus"},
		{mode: "ring", url: "redis://h:6379", problem: "THROTTLER_REDIS_MODE", says: `must be one of "single", "cluster", "sentinel", got "ring"`},
	}
	for _, tt := range tests {
		t.Run(tt.mode+" "+tt.url, func(t *testing.T) {
			c, ps := Parse(map[string]string{"THROTTLER_REDIS_MODE": tt.mode, "REDIS_URL": tt.url})
			if tt.problem == "" {
				if len(ps) > 0 {
					t.Fatalf("problems: %v", ps.Err())
				}
				if !slices.Equal(c.RedisAddrs, tt.addrs) {
					t.Fatalf("RedisAddrs = %q, want %q", c.RedisAddrs, tt.addrs)
				}
				return
			}
			if len(ps) != 1 || ps[0].Var != tt.problem || !strings.Contains(ps[0].Text, tt.says) {
				t.Fatalf("problems: %v\nwant one of %s saying %q", ps.Err(), tt.problem, tt.says)
			}
			if strings.Contains(ps.Err().Error(), "pw") {
				t.Errorf("problem shows the password: %v", ps.Err())
			}
		})
	}
}

func TestPrintRedisSummaryMasksSecrets(t *testing.T) {
	t.Parallel()
	tests := []struct {
		mode, url, line, summary string
	}{
		{
			"cluster", "rediss://app:clusterpw@h1:6379?addr=h2:6379&addr=h3:6379",
			"REDIS_URL=rediss://app:****@h1:6379?addr=h2:6379&addr=h3:6379\n",
			"# redis: cluster, seed nodes h1:6379 h2:6379 h3:6379, TLS\n",
		},
		{
			"sentinel", "redis://sen:sentinelpw@s1:26379/2?master_name=jobs&username=app&password=masterpw&addr=s2:26379",
			"REDIS_URL=redis://sen:****@s1:26379/2?master_name=jobs&username=app&password=****&addr=s2:26379\n",
			"# redis: sentinel, master \"jobs\", sentinels s1:26379 s2:26379\n",
		},
	}
	for _, tt := range tests {
		c := mustLoad(t, map[string]string{"THROTTLER_REDIS_MODE": tt.mode, "REDIS_URL": tt.url})
		var buf bytes.Buffer
		if err := c.Print(&buf); err != nil {
			t.Fatal(err)
		}
		out := buf.String()
		for _, secret := range []string{"clusterpw", "sentinelpw", "masterpw"} {
			if strings.Contains(out, secret) {
				t.Errorf("Print shows %q:\n%s", secret, out)
			}
		}
		for _, want := range []string{tt.line, "THROTTLER_REDIS_MODE=" + tt.mode + "\n", tt.summary} {
			if !strings.Contains(out, want) {
				t.Errorf("Print lacks %q:\n%s", want, out)
			}
		}
	}
}

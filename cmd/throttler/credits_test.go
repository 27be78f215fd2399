package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// TestCreditsCommands: set, add, get and history against real servers,
// as a user types them, and with --json; a server's failure exits 1.
func TestCreditsCommands(t *testing.T) {
	s := setup(t)
	t.Setenv("THROTTLER_DEFAULT_LIMIT", "10/s+credits")
	cli(t, "credits", "get", "acme").want(t, "get of a tenant never funded", exitOK, []string{"acme: 0\n"}, nil)
	cli(t, "credits", "set", "acme", "1000").want(t, "set", exitOK, []string{"acme: 1000\n"}, nil)
	cli(t, "credits", "add", "acme", "500").want(t, "add", exitOK, []string{"acme: 1500\n"}, nil)
	cli(t, "credits", "get", "acme").want(t, "get", exitOK, []string{"acme: 1500\n"}, nil)
	cli(t, "credits", "history", "acme").want(t, "history", exitOK, []string{"set 1000  0 -> 1000", "add 500  1000 -> 1500"}, nil)
	cli(t, "credits", "history", "globex").want(t, "history of a tenant never changed", exitOK, []string{"globex: no change recorded"}, nil)

	r := cli(t, "credits", "add", "acme", "1", "--json")
	var ch struct {
		Op       string `json:"op"`
		Balance  int64  `json:"balance"`
		Before   int64  `json:"before"`
		Released int    `json:"released"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &ch); err != nil || r.code != exitOK || ch.Op != "add" || ch.Balance != 1501 || ch.Before != 1500 {
		t.Fatalf("add --json: exit %d, %q (%v)", r.code, r.stdout, err)
	}
	r = cli(t, "credits", "get", "acme", "--json")
	var st struct {
		Balance int64 `json:"balance"`
		Trusted bool  `json:"trusted"`
		Last    struct {
			Op string `json:"op"`
		} `json:"last"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || st.Balance != 1501 || !st.Trusted || st.Last.Op != "add" {
		t.Fatalf("get --json: exit %d, %q (%v)", r.code, r.stdout, err)
	}

	cli(t, "inspect", "acme").want(t, "inspect", exitOK, []string{"credits: balance 1501", "a job arriving now runs at once"}, nil)
	t.Setenv("THROTTLER_DEFAULT_LIMIT", "10/s")
	cli(t, "inspect", "acme").want(t, "inspect without the workers' credits", exitOK, []string{"credits: balance 1501"}, nil)
	t.Setenv("THROTTLER_DEFAULT_LIMIT", "10/s+credits")

	// Redis restarted: the balance is gone, the history is not.
	s.redis.Restart(t)
	cli(t, "credits", "get", "acme").want(t, "get after Redis restarted empty", exitOK, []string{"acme: 0\n", "LOST", "add 1 left 1501"}, nil)
	cli(t, "credits", "history", "acme").want(t, "history after Redis restarted", exitOK, []string{"add 1  1500 -> 1501"}, nil)
	cli(t, "credits", "get", "acme", "--json").want(t, "get --json of a lost balance", exitOK, []string{`"lost": true`, `"trusted": false`}, nil)
	cli(t, "inspect", "acme").want(t, "inspect of a lost balance", exitOK,
		[]string{"a job arriving now waits for credits", "credits: balance 0 (no operator set or added to it"}, nil)
	t.Setenv("THROTTLER_DEFAULT_LIMIT", "credits")
	cli(t, "inspect", "acme").want(t, "inspect under credits alone", exitOK, []string{"limits none (no rate limit; credits)"}, nil)
	t.Setenv("THROTTLER_DEFAULT_LIMIT", "10/s+credits")

	cli(t, "credits", "add", "acme", "7").want(t, "add on a lost balance", exitOK, []string{"acme: 7\n"}, []string{"Redis had lost the balance before"})
	cli(t, "credits", "history", "acme").want(t, "history of an add on a lost balance", exitOK, []string{"add 7  0 -> 7 (Redis had lost the balance before"}, nil)

	s.redis.Stop(t)
	cli(t, "credits", "add", "acme", "5").want(t, "add with Redis down", exitFailed, nil, []string{"throttler credits:"})
}

// TestCreditsRefuseBadInput: bad arguments exit 2 with a message naming
// what is wrong, before any connection.
func TestCreditsRefuseBadInput(t *testing.T) {
	t.Setenv("NATS_URL", "nats://127.0.0.1:1")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"credits"}, "usage"},
		{[]string{"credits", "give", "acme", "5"}, "usage"},
		{[]string{"credits", "add", "acme"}, `takes TENANT N, got "acme"`},
		{[]string{"credits", "frob", "acme"}, `no command "frob"`},
		{[]string{"credits", "add", "acme", "+5"}, "whole number"},
		{[]string{"credits", "add", "acme", "0"}, "from 1"},
		{[]string{"credits", "add", "acme", "-5"}, "from 1"},
		{[]string{"credits", "add", "acme", "1.5"}, "whole number"},
		{[]string{"credits", "set", "acme", "-1"}, "from 0"},
		{[]string{"credits", "set", "acme", "99999999999999999999"}, "whole number"},
		{[]string{"credits", "get", "bad tenant"}, "TENANT"},
		{[]string{"credits", "get", "acme", "--frobnicate"}, "flag"},
	} {
		var out, errOut bytes.Buffer
		if got := run(c.args, &out, &errOut); got != exitConfig || !strings.Contains(errOut.String(), c.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d mentioning %q", c.args, got, errOut.String(), exitConfig, c.want)
		}
	}
}

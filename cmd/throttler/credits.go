package main

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/throttler/throttler/credits"
	"github.com/throttler/throttler/tenant"
	"github.com/throttler/throttler/throttle"
)

// creditsUsage is the usage of `throttler credits`.
const creditsUsage = `usage: throttler credits add TENANT N      add N (≥ 1) to a tenant's balance; its waiting jobs that N covers start
       throttler credits set TENANT N      set a tenant's balance to N (≥ 0)
       throttler credits get TENANT        the balance, as TENANT: BALANCE
       throttler credits history TENANT    every recorded add and set, oldest first
       each takes --json`

// creditsCmd runs `throttler credits ARGS` and returns the exit status:
// 2 for bad input, 1 when a server fails.
func creditsCmd(args []string, quiet bool, stdout, stderr io.Writer) int {
	fail := func(status int, format string, a ...any) int {
		fmt.Fprintf(stderr, "throttler credits: "+format+"\n", a...)
		return status
	}
	// Only --json is a flag: "-5" is an amount (refused below, by name),
	// not a flag the command does not know. After "--" nothing is a flag:
	// a tenant may start with '-'.
	asJSON := false
	var rest []string
args:
	for i, a := range args {
		switch {
		case a == "--":
			rest = append(rest, args[i+1:]...)
			break args
		case a == "--json" || a == "-json":
			asJSON = true
		case strings.HasPrefix(a, "-") && strings.TrimLeft(a[1:], "0123456789") != "":
			return fail(exitConfig, "flag %s not defined\n%s", a, creditsUsage)
		default:
			rest = append(rest, a)
		}
	}
	want := map[string]int{"add": 3, "set": 3, "get": 2, "history": 2}
	if len(rest) == 0 {
		return fail(exitConfig, "%s", creditsUsage)
	}
	if want[rest[0]] == 0 {
		return fail(exitConfig, "no command %q: want add, set, get or history\n%s", rest[0], creditsUsage)
	}
	if want[rest[0]] != len(rest) {
		args := "TENANT"
		if want[rest[0]] == 3 {
			args = "TENANT N"
		}
		return fail(exitConfig, "credits %s takes %s, got %q\n%s", rest[0], args, strings.Join(rest[1:], " "), creditsUsage)
	}
	op, t := rest[0], rest[1]
	if err := tenant.Validate(t); err != nil {
		return fail(exitConfig, "TENANT: %v", err)
	}
	var n int64
	if op == "add" || op == "set" {
		least := int64(1)
		if op == "set" {
			least = 0
		}
		digits := rest[2] != "" && strings.TrimLeft(rest[2], "0123456789") == ""
		var err error
		if n, err = strconv.ParseInt(rest[2], 10, 64); !digits || err != nil || n < least || n > throttle.MaxCredits {
			return fail(exitConfig, "N: want a whole number from %d to %d, got %q", least, int64(throttle.MaxCredits), rest[2])
		}
	}
	s, status := openOps("credits", stderr, quiet, uses{nats: true, redis: op != "history"})
	if status != exitOK {
		return status
	}
	defer s.close()
	o := credits.Options{JetStream: s.js, Records: s.cfg.CreditsStream, Replicas: jobsReplicas(s), Stream: s.cfg.Stream, Schedules: s.cfg.Schedules,
		CostHeader: s.cfg.CostHeader}
	var out any
	switch op {
	case "history":
		h, err := credits.History(s.ctx, s.js, s.cfg.CreditsStream, t)
		if err != nil {
			return fail(exitFailed, "%v", err)
		}
		out = h
		if !asJSON {
			printHistory(stdout, t, h)
		}
	default:
		lim, closeRedis, err := s.limiter()
		if err != nil {
			return fail(exitConfig, "%v", err)
		}
		defer closeRedis()
		o.Balances = lim
		if op == "get" {
			st, err := credits.Get(s.ctx, o, t)
			if err != nil {
				return fail(failStatus(err), "%v", redisUnreachable(s.cfg, err))
			}
			out = st
			if !asJSON {
				printBalance(stdout, st)
			}
			break
		}
		change := credits.Add
		if op == "set" {
			change = credits.Set
		}
		ch, err := change(s.ctx, o, t, n)
		if err != nil {
			return fail(failStatus(err), "%v", redisUnreachable(s.cfg, err))
		}
		out = ch
		if !asJSON {
			fmt.Fprintf(stdout, "%s: %d\n", t, ch.Balance)
			if ch.BeforeLost {
				fmt.Fprintf(stderr, "throttler credits: Redis had lost the balance before (it restarted empty or failed over); what was left is unknown and was replaced\n")
			} else if !ch.BeforeTrusted {
				fmt.Fprintf(stderr, "throttler credits: the balance of before (%d) was not trusted (written before Redis last restarted or failed over) and was replaced\n", ch.Before)
			}
			if ch.Released > 0 {
				fmt.Fprintf(stderr, "throttler credits: %s the balance covers brought back in order, to start now\n", jobs(ch.Released))
			}
		}
	}
	if asJSON {
		if err := printJSON(stdout, out); err != nil {
			return fail(exitFailed, "%v", err)
		}
	}
	return exitOK
}

// failStatus is the exit status of a credits operation's error.
func failStatus(err error) int {
	if errors.Is(err, throttle.ErrInvalid) {
		return exitConfig
	}
	return exitFailed
}

// jobsReplicas is the jobs stream's replicas, which the record stream
// takes when it is created: 1 when the stream cannot be read.
func jobsReplicas(s *opsSession) int {
	st, err := s.js.Stream(s.ctx, s.cfg.Stream)
	if err != nil {
		return 1
	}
	return st.CachedInfo().Config.Replicas
}

// printBalance writes a tenant's balance as TENANT: BALANCE, and what
// makes it doubtful on the lines below.
func printBalance(w io.Writer, st credits.Status) {
	fmt.Fprintf(w, "%s: %d\n", st.Tenant, st.Balance)
	switch {
	case st.Lost:
		fmt.Fprintf(w, "  LOST: Redis no longer holds the balance (it restarted empty, or failed over to a replica without it) since the last "+
			"recorded change (%s). Spending is not recorded, so the history cannot say what was left: set it from your own records "+
			"(throttler credits set %s N); its jobs wait meanwhile.\n", describeRecord(*st.Last), st.Tenant)
	case !st.Trusted:
		fmt.Fprintf(w, "  NOT TRUSTED: written before Redis last restarted or failed over, which may have lost the spending since; its jobs wait. "+
			"If Redis lost no write (a clean restart with persistence), throttler credits set %s %d trusts it again; else set it from your own records.\n",
			st.Tenant, st.Balance)
	}
	if st.WaitingFrom > 0 {
		fmt.Fprintf(w, "  jobs wait for a top-up, in order, from the job at stream sequence %d on\n", st.WaitingFrom)
	}
}

// describeRecord says what a recorded change did, for people.
func describeRecord(r credits.Record) string {
	return fmt.Sprintf("%s %d left %d at %s", r.Op, r.Amount, r.Balance, r.At.Format(time.RFC3339))
}

// jobs says "1 waiting job" or "N waiting jobs".
func jobs(n int) string {
	if n == 1 {
		return "1 waiting job"
	}
	return fmt.Sprintf("%d waiting jobs", n)
}

// printHistory writes a tenant's recorded changes, one a line.
func printHistory(w io.Writer, t string, h []credits.Record) {
	if len(h) == 0 {
		fmt.Fprintf(w, "%s: no change recorded\n", t)
		return
	}
	for _, r := range h {
		note := ""
		switch {
		case r.BeforeLost:
			note = " (Redis had lost the balance before: what was left is unknown)"
		case !r.BeforeTrusted:
			note = " (the untrusted balance before was replaced)"
		}
		fmt.Fprintf(w, "%s  %-3s %d  %d -> %d%s\n", r.At.Format(time.RFC3339), r.Op, r.Amount, r.Before, r.Balance, note)
	}
}

package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/config"
	"github.com/throttler/throttler/internal/app"
	"github.com/throttler/throttler/pause"
)

// pauseUsage is the usage of `throttler pause` and `throttler resume`.
const pauseUsage = `usage: throttler pause TENANT [--until TIME | --for DURATION] [--reason TEXT] [--json]
       throttler resume TENANT [--json]`

// pauseCmd runs `throttler pause ARGS` (resume: `throttler resume ARGS`)
// and returns the exit status.
func pauseCmd(args []string, resume, quiet bool, stdout, stderr io.Writer) int {
	name := "throttler pause"
	if resume {
		name = "throttler resume"
	}
	fail := func(status int, format string, a ...any) int {
		fmt.Fprintf(stderr, name+": "+format+"\n", a...)
		return status
	}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	asJSON := fs.Bool("json", false, "")
	var until, reason string
	var forD time.Duration
	if !resume {
		fs.StringVar(&until, "until", "", "")
		fs.Var(durationValue{&forD}, "for", "")
		fs.StringVar(&reason, "reason", "", "")
	}
	rest, err := parseInterleaved(fs, args)
	if err != nil {
		return fail(exitConfig, "%v\n%s", err, pauseUsage)
	}
	if len(rest) != 1 {
		return fail(exitConfig, "%s", pauseUsage)
	}
	forSet := false
	fs.Visit(func(f *flag.Flag) { forSet = forSet || f.Name == "for" })
	if forSet && forD <= 0 {
		return fail(exitConfig, "--for must be positive, got %s", forD)
	}
	req := pause.Request{Tenant: rest[0], Reason: reason, For: forD}
	if until != "" {
		if req.Until, err = time.Parse(time.RFC3339, until); err != nil {
			return fail(exitConfig, "--until must be an RFC 3339 time such as 2026-12-05T09:00:00Z, got %q", until)
		}
	}
	if err := req.Check(time.Now()); err != nil {
		// What is wrong with the request, before any connection.
		return fail(exitConfig, "%v", err)
	}
	cfg, ok := loadConfig(stderr)
	if !ok {
		return exitConfig
	}
	if cfg.PauseBucket == config.LimitsOff {
		return fail(exitConfig, "THROTTLER_PAUSE_BUCKET is off: the workers read no pauses")
	}
	announce(stderr, quiet, cfg.Config, uses{nats: true})
	ctx, cancel := context.WithTimeout(context.Background(), cliTimeout)
	defer cancel()
	nc, js, err := connectJetStream(cfg, "pause")
	if err != nil {
		return fail(exitFailed, "%v", err)
	}
	defer nc.Close()
	o := pauseOptions(js, cfg)
	var out any
	if resume {
		res, err := pause.Resume(ctx, o, req.Tenant)
		if err != nil {
			return fail(exitFailed, "%v", err)
		}
		out = res
		if !*asJSON {
			if res.Was == nil {
				fmt.Fprintf(stdout, "%s was not paused; %d paused jobs brought back\n", res.Tenant, res.Released)
			} else {
				fmt.Fprintf(stdout, "%s resumed; every worker starts its jobs again within a second; %d paused jobs brought back in order\n",
					res.Tenant, res.Released)
			}
		}
	} else {
		p, err := pause.Put(ctx, o, req)
		if err != nil {
			return fail(exitFailed, "%v", err)
		}
		out = p
		if !*asJSON {
			fmt.Fprintf(stdout, "%s paused %s (revision %d); every worker stops starting its jobs within a second\n",
				p.Tenant, describePause(p), p.Revision)
		}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			return fail(exitFailed, "%v", err)
		}
	}
	return exitOK
}

// pauseOptions are the pause operations' options in cfg's fleet.
func pauseOptions(js jetstream.JetStream, cfg *app.Settings) pause.Options {
	return pause.Options{JetStream: js, Bucket: cfg.PauseBucket, Stream: cfg.Stream, Schedules: cfg.Schedules}
}

// describePause says until when and why p pauses, for people.
func describePause(p pause.Pause) string {
	s := "until resumed"
	if !p.Until.IsZero() {
		s = "until " + p.Until.UTC().Format(time.RFC3339)
	}
	if p.Reason != "" {
		s += ": " + p.Reason
	}
	return s
}

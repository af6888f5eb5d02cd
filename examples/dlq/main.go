// Command dlq lets an operator work with a topic's dead letters on any
// broker sluice has an adapter for: list, show, redrive, purge, stats.
//
//	go run ./examples/dlq -url amqp://guest:guest@127.0.0.1:5672/ list orders --group billing
//	go run ./examples/dlq stats orders --group billing
//	go run ./examples/dlq redrive orders --group billing --reason "negative total" \
//		--operator alice --note "fixed in 1.4.2" --dry-run
//
// It is a thin shell over package operators/deadletter, which does the
// work through the Port alone; see docs/dead-letters.md. It lives under
// examples/ because the module ships no binaries: an operator runs it with
// go run, or copies it into their own tooling with the flags they need.
//
// The global flags come before the command: -url (default mem://), -json
// (one JSON document per command, for scripts; a table otherwise), -v,
// and -demo N, which first dead-letters N sample orders (mem:// is a
// broker inside this process, so a session on it starts empty).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/sluicemq/sluice/examples/internal/app"
	"github.com/sluicemq/sluice/operators/deadletter"
	"github.com/sluicemq/sluice/ports"
)

// Replaced by the test for a reproducible session.
var (
	now   = time.Now
	newID = ports.NewID
)

func main() {
	fl := app.RegisterFlags()
	g := globals{}
	flag.BoolVar(&g.json, "json", false, "print one JSON document per command instead of a table")
	flag.IntVar(&g.demo, "demo", 0, "first dead-letter this many sample orders into the area (for a session on mem://)")
	flag.Usage = func() { fmt.Fprint(flag.CommandLine.Output(), usage); flag.PrintDefaults() }
	flag.Parse()
	app.Main("dlq", func(ctx context.Context) error {
		logger := fl.Logger()
		if logger == nil {
			logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
		}
		g.logger, g.progress = logger, os.Stderr
		a, err := app.Open(ctx, fl.URL(), fl.Logger(), io.Discard)
		if err != nil {
			return err
		}
		defer func() { _ = a.Close(context.WithoutCancel(ctx)) }()
		return run(ctx, a, g, flag.Args(), os.Stdout)
	})
}

const usage = `usage: dlq [-url URL] [-json] [-v] [-demo N] COMMAND TOPIC [ARGS] --group GROUP [FLAGS]

commands:
  list    TOPIC            the dead letters, filtered
  show    TOPIC ID         one dead letter; its payload only with --reveal
  redrive TOPIC            send a selection back to its source topic (or --to)
  purge   TOPIC            remove a selection
  stats   TOPIC            counts by reason and source, first and last
  audit   TOPIC            the audit records of redrives, purges and reveals
  declare TOPIC            declare the area with its retention

`

type globals struct {
	json     bool
	demo     int
	logger   *slog.Logger
	progress io.Writer // the progress line of long redrives; nil: none
}

// command is one parsed command line.
type command struct {
	name, topic string
	args        []string // positionals after the topic
	group       string
	filter      deadletter.Filter
	since, till string
	limit       int
	batch       int
	operator    string
	note        string
	to          string
	force, dry  bool
	reveal      bool
	maxAge      time.Duration
	maxLength   int
}

func parse(args []string) (command, error) {
	var c command
	if len(args) < 2 {
		return c, fmt.Errorf("%w: want COMMAND TOPIC (see -h)", ports.ErrInvalid)
	}
	c.name, c.topic = args[0], args[1]
	rest := args[2:]
	for len(rest) > 0 && !strings.HasPrefix(rest[0], "-") {
		c.args, rest = append(c.args, rest[0]), rest[1:]
	}
	fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&c.group, "group", "", "the group the area is read through (required)")
	fs.StringVar(&c.filter.Reason, "reason", "", "select reasons containing this text")
	fs.StringVar(&c.filter.Key, "key", "", "select keys matching this pattern")
	fs.StringVar(&c.filter.Type, "type", "", "select types (ce-type) matching this pattern")
	ids := fs.String("ids", "", "select these comma-separated message ids")
	fs.StringVar(&c.since, "since", "", "select from this time (RFC 3339, or a duration ago: 24h)")
	fs.StringVar(&c.till, "until", "", "select before this time (RFC 3339, or a duration ago)")
	fs.IntVar(&c.limit, "limit", 0, "examine at most this many dead letters per pass (default 10000)")
	fs.IntVar(&c.batch, "batch", 0, "hold at most this many dead letters at once; a crash duplicates at most one batch (default 100)")
	fs.StringVar(&c.operator, "operator", "", "who acts (required by redrive, purge and show --reveal)")
	fs.StringVar(&c.note, "note", "", "why (required by redrive, purge and show --reveal)")
	fs.StringVar(&c.to, "to", "", "redrive to this topic instead of each message's source")
	fs.BoolVar(&c.force, "force", false, "redrive messages already redriven the maximum number of times")
	fs.BoolVar(&c.dry, "dry-run", false, "select and report; change nothing")
	fs.BoolVar(&c.reveal, "reveal", false, "show the payload (audited)")
	fs.DurationVar(&c.maxAge, "max-age", 0, "declare: drop dead letters older than this (default 336h)")
	fs.IntVar(&c.maxLength, "max-length", 0, "declare: keep at most this many dead letters (default 100000)")
	if err := fs.Parse(rest); err != nil {
		return c, fmt.Errorf("%w: %s: %v", ports.ErrInvalid, c.name, err)
	}
	c.args = append(c.args, fs.Args()...)
	if *ids != "" {
		c.filter.IDs = strings.Split(*ids, ",")
	}
	var err error
	if c.filter.Since, err = parseTime(c.since); err != nil {
		return c, err
	}
	if c.filter.Until, err = parseTime(c.till); err != nil {
		return c, err
	}
	if c.group == "" {
		return c, fmt.Errorf("%w: %s: --group is required", ports.ErrInvalid, c.name)
	}
	return c, nil
}

// parseTime reads RFC 3339 or a duration before now ("24h").
func parseTime(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		return now().Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return t, fmt.Errorf("%w: time %q is neither RFC 3339 nor a duration", ports.ErrInvalid, s)
	}
	return t, nil
}

// run carries out one command line on a.
func run(ctx context.Context, a ports.Adapter, g globals, args []string, w io.Writer) error {
	c, err := parse(args)
	if err != nil {
		return err
	}
	area, err := deadletter.New(a, ports.Topic(c.topic), c.group, deadletter.Options{
		Limit: c.limit, Batch: c.batch, Logger: g.logger, Now: now, NewID: newID,
	})
	if err != nil {
		return err
	}
	if g.demo > 0 {
		if err := seed(ctx, a, area, g.demo); err != nil {
			return fmt.Errorf("demo: %w", err)
		}
	}
	out := printer{w: w, json: g.json}
	switch c.name {
	case "list":
		entries, pass, err := area.List(ctx, c.filter)
		if err != nil {
			return err
		}
		return out.list(entries, pass)
	case "show":
		if len(c.args) != 1 {
			return fmt.Errorf("%w: show TOPIC ID: want one id", ports.ErrInvalid)
		}
		e, err := area.Show(ctx, c.args[0], deadletter.ShowOptions{Reveal: c.reveal, Operator: c.operator, Note: c.note})
		if err != nil {
			return err
		}
		return out.show(e)
	case "stats":
		s, err := area.Stats(ctx)
		if err != nil {
			return err
		}
		return out.stats(area, s)
	case "redrive", "purge":
		r := deadletter.Request{Operator: c.operator, Note: c.note, Filter: c.filter, Target: ports.Topic(c.to), Force: c.force, DryRun: c.dry}
		if g.progress != nil && !g.json {
			r.Progress = progressLine(g.progress, c.name)
		}
		var res deadletter.Result
		if c.name == "redrive" {
			res, err = area.Redrive(ctx, r)
		} else {
			res, err = area.Purge(ctx, r)
		}
		if r.Progress != nil && res.Done > 0 {
			fmt.Fprintln(g.progress)
		}
		if perr := out.result(c.name, res); perr != nil {
			return errors.Join(err, perr)
		}
		return err
	case "audit":
		recs, pass, err := area.AuditTrail(ctx)
		if err != nil {
			return err
		}
		return out.audit(recs, pass)
	case "declare":
		d, err := area.Declare(ctx, deadletter.Retention{MaxAge: c.maxAge, MaxLength: c.maxLength})
		if err != nil {
			return err
		}
		return out.declared(area, d)
	}
	return fmt.Errorf("%w: unknown command %q (list, show, redrive, purge, stats, audit, declare)", ports.ErrInvalid, c.name)
}

// progressLine rewrites one line on w after each batch.
func progressLine(w io.Writer, verb string) func(deadletter.Progress) {
	return func(p deadletter.Progress) {
		const width = 30
		done := p.Settled
		bar := strings.Repeat("#", done*width/max(p.Selected, 1))
		fmt.Fprintf(w, "\r%s [%-*s] %d/%d", verb, width, bar, done, p.Selected)
		if verb == "redrive" {
			fmt.Fprintf(w, " (%d sent)", p.Sent)
		}
	}
}

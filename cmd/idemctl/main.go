// Command idemctl answers an operator's questions about idemkit's dedupe records and performs the
// repairs that are safe.
//
//	go install github.com/idemkit/idemkit/cmd/idemctl@latest
//	export IDEMCTL_DB='mysql://user:pw@tcp(db:3306)/shop' IDEMCTL_REDIS=redis:6379
//	idemctl inspect 'POST /orders' key-1     # why does key-1 answer 409?
//	idemctl list --stuck                      # claims whose holder died or stalled
//	idemctl stats                             # per scope: states, stuck, takeovers
//	idemctl release 'POST /orders' key-1      # end a stuck claim (fenced), so a retry runs
//	idemctl purge --status FAILED --older-than 72h
//	idemctl sweep --dry-run                   # what the sweeper would delete or recover
//	idemctl dtm GID                           # a global transaction beside its records
//
// Run `idemctl help` for every command, flag, environment variable and exit code. It reads and
// writes through package admin, which applies the application's own rules for namespaces and keys.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/admin"
)

// Exit codes.
const (
	exitOK       = 0 // done
	exitError    = 1 // the database, Redis or DTM failed, the table is missing, or an instance's /metrics could not be read
	exitUsage    = 2 // bad command line: unknown command or flag, wrong arguments, conflicting flags, malformed scope or key, bad DSN
	exitNotFound = 3 // no such record, scope or global transaction
	exitRefused  = 4 // nothing changed: the record changed since it was read, the change is unsafe without --force, or it was not confirmed
)

const usageText = `idemctl — inspect and repair idemkit's dedupe records

Usage:
  idemctl <command> [flags] [arguments]

Commands:
  inspect SCOPE KEY   the record of a key: status, fence, owner, lease, age, expiry, gid, result, error;
                      with Redis the lock holder and the cached result; what a new attempt would get
  list                records matching filters (--scope --status --stuck --older-than --gid --limit)
  stats               per scope: records by status, stuck claims, takeovers, expired, oldest claim;
                      the duplicate rate from the applications' metrics (--metrics)
  release SCOPE KEY   end a stuck claim: FAILED, fence + 1, so a retry runs and the stalled holder
                      can never finish it (fenced: refused if the record changed since it was read)
  purge SCOPE KEY     delete a record (fenced); or with filters instead of SCOPE KEY, every match
  sweep --dry-run     what the sweeper would delete, recover or leave to the reconciler
  sweep               run one sweeper pass over the whole table
  dtm GID             a global transaction's status from DTM beside the records carrying its gid
  help [COMMAND]      this text, or a command's flags

Every command takes --help. A scope and key are given as the application passes them to idemkit
(idemkit.Call.Scope and Key); idemctl applies the namespace and hashing. A key starting with '-'
goes after '--'.

Connection (flag, or environment variable):
  --db DSN            IDEMCTL_DB            mysql://<go-sql-driver DSN>, postgres://... (URL),
                                            sqlite://<path of an existing file>
  --table NAME        IDEMCTL_TABLE         record table (default idemkit_records)
  --namespace NS      IDEMCTL_NAMESPACE     the application's idemkit.Options.Namespace
  --max-key-len N     IDEMCTL_MAX_KEY_LEN   the application's idemkit.Options.MaxKeyLen (default 255)
  --redis ADDR        IDEMCTL_REDIS         host:port or redis://... of the application's lock (optional);
                                            host:port,host:port,... for a Redis Cluster; used by
                                            inspect, release, purge and sweep (not --dry-run) only
  --redis-prefix P    IDEMCTL_REDIS_PREFIX  lock.Options.Prefix (default idemkit:)
  --dtm URL           IDEMCTL_DTM           DTM's HTTP API, e.g. http://dtm:36789/api/dtmsvr (dtm command)
  --metrics URLS      IDEMCTL_METRICS       comma-separated /metrics URLs of the applications (stats)
  --timeout D         IDEMCTL_TIMEOUT       bound on the whole command (default 30s)
  --json                                    machine-readable output on stdout

Exit codes:
  0  done
  1  error: the database, Redis or DTM failed, the table is missing, or an instance's /metrics
     could not be read (stats prints the rest)
  2  usage: unknown command or flag, wrong arguments, conflicting flags, malformed scope or key, bad DSN
  3  not found: no such record, scope or global transaction
  4  refused, nothing changed: the record changed since it was read, the change is unsafe without
     --force, or it was not confirmed
`

func main() {
	redis.SetLogger(quietLogger{}) // go-redis logs dial failures itself; idemctl reports them once
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(runEnv(ctx, args{
		argv: os.Args[1:], stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr,
		getenv: os.Getenv, terminal: isTerminal(os.Stderr), now: time.Now,
	}))
}

// quietLogger discards go-redis's own log lines.
type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// args is one invocation's world: arguments, streams, environment, clock.
type args struct {
	argv           []string
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
	terminal       bool // stderr is a terminal: show progress
	now            func() time.Time
}

// run runs idemctl with argv, no input, the process's environment, and returns the exit code.
func run(argv []string, stdout, stderr io.Writer) int {
	return runEnv(context.Background(), args{argv: argv, stdin: strings.NewReader(""), stdout: stdout, stderr: stderr,
		getenv: os.Getenv, now: time.Now})
}

// command is one subcommand.
type command struct {
	name, args, summary string
	// flags adds the command's own flags to fs, storing them in o.
	flags func(fs *flag.FlagSet, o *opts)
	// positional is how many arguments it takes: exactly n, or -1 for 0 or 2 (purge).
	positional int
	run        func(c *cli, ctx context.Context, pos []string) error
	noDB       bool
	// redis: the command reads or clears Redis (--redis); the others never connect to it, so a Redis
	// outage leaves the table readable. sweep does too without --dry-run: see usesRedis.
	redis bool
}

// usesRedis reports whether cmd, given o, reads or clears Redis: a sweep pass (not --dry-run) deletes
// the locks the recovered claims' dead holders still hold.
func (cmd *command) usesRedis(o *opts) bool {
	return cmd.redis || cmd.name == "sweep" && !o.dryRun
}

var commands = []*command{
	{name: "inspect", args: "SCOPE KEY", summary: "the record of a key and its lock and cached result", positional: 2,
		flags: func(fs *flag.FlagSet, o *opts) {
			fs.IntVar(&o.preview, "preview", 200, "bytes of the result to show")
		}, run: (*cli).inspect, redis: true},
	{name: "list", summary: "records matching filters", flags: filterFlags(100), run: (*cli).list},
	{name: "stats", summary: "per-scope statistics", flags: func(fs *flag.FlagSet, o *opts) {
		fs.StringVar(&o.filter.Scope, "scope", "", "only this scope")
	}, run: (*cli).stats},
	{name: "release", args: "SCOPE KEY", summary: "end a stuck PROCESSING claim (FAILED, fence + 1)", positional: 2,
		flags: func(fs *flag.FlagSet, o *opts) {
			confirmFlags(fs, o)
			fs.StringVar(&o.reason, "reason", "", "why, written into the record's error with who released it")
		}, run: (*cli).release, redis: true},
	{name: "purge", args: "[SCOPE KEY]", summary: "delete one record, or every record matching filters", positional: -1,
		flags: func(fs *flag.FlagSet, o *opts) {
			filterFlags(100)(fs, o)
			confirmFlags(fs, o)
			fs.DurationVar(&o.lease, "lease", idemkit.DefaultLease, "the application's Lease: without --redis, a mark written less than this ago may still be running, and is skipped")
		}, run: (*cli).purge, redis: true},
	{name: "sweep", summary: "what the sweeper would do (--dry-run), or one sweeper pass", flags: func(fs *flag.FlagSet, o *opts) {
		fs.BoolVar(&o.dryRun, "dry-run", false, "only show what would be deleted, recovered or reconciled")
		fs.IntVar(&o.filter.Limit, "limit", 100, "records listed per kind (--dry-run), or handled per task")
		fs.BoolVar(&o.yes, "yes", false, "do not ask for confirmation")
	}, run: (*cli).sweep},
	{name: "dtm", args: "GID", summary: "a global transaction's status from DTM and its records", positional: 1,
		flags: func(fs *flag.FlagSet, o *opts) {
			fs.IntVar(&o.filter.Limit, "limit", 100, "records listed")
		}, run: (*cli).dtm},
}

func filterFlags(limit int) func(fs *flag.FlagSet, o *opts) {
	return func(fs *flag.FlagSet, o *opts) {
		fs.StringVar(&o.filter.Scope, "scope", "", "only this scope (as the application names it)")
		fs.StringVar(&o.status, "status", "", "only this status: PROCESSING, SUCCEEDED, FAILED or REJECTED")
		fs.BoolVar(&o.filter.Stuck, "stuck", false, "only PROCESSING records whose lease ran out")
		fs.DurationVar(&o.filter.OlderThan, "older-than", 0, "only records last written at least this long ago, e.g. 1h")
		fs.StringVar(&o.filter.GID, "gid", "", "only the records of this global transaction (scans the table)")
		fs.IntVar(&o.filter.Limit, "limit", limit, "at most this many records")
	}
}

func confirmFlags(fs *flag.FlagSet, o *opts) {
	fs.BoolVar(&o.yes, "yes", false, "do not ask for confirmation")
	fs.BoolVar(&o.force, "force", false, "also act on live claims and claims of a global transaction (unsafe: see help)")
}

// usageError is a bad command line (exit 2).
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return &usageError{fmt.Sprintf(format, a...)} }

// errNotConfirmed: the operator did not confirm (exit 4).
var errNotConfirmed = errors.New("not confirmed: nothing changed (--yes skips the question)")

// errNotFound marks a not-found outcome that is no idemkit error (an unknown gid).
var errNotFound = errors.New("not found")

// isHelp reports whether arg names the help command or asks for help.
func isHelp(arg string) bool {
	switch arg {
	case "help", "-h", "-help", "--help":
		return true
	}
	return false
}

func runEnv(ctx context.Context, a args) int {
	if len(a.argv) == 0 {
		fmt.Fprint(a.stderr, usageText)
		return exitUsage
	}
	name, rest := a.argv[0], a.argv[1:]
	if isHelp(name) {
		if len(rest) > 0 && !isHelp(rest[0]) { // help's own help is this text
			if cmd := findCommand(rest[0]); cmd != nil {
				printCommandHelp(a.stdout, cmd)
				return exitOK
			}
			fmt.Fprintf(a.stderr, "idemctl: unknown command %q\n", rest[0])
			return exitUsage
		}
		fmt.Fprint(a.stdout, usageText)
		return exitOK
	}
	cmd := findCommand(name)
	if cmd == nil {
		fmt.Fprintf(a.stderr, "idemctl: unknown command %q (run idemctl help)\n", name)
		return exitUsage
	}
	c := &cli{args: a}
	fs := c.flagSet(cmd)
	pos, err := parseInterleaved(fs, rest)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printCommandHelp(a.stdout, cmd)
			return exitOK
		}
		fmt.Fprintf(a.stderr, "idemctl %s: %v (idemctl %s --help)\n", cmd.name, err, cmd.name)
		return exitUsage
	}
	if err := c.validate(cmd, pos); err != nil {
		return c.fail(cmd, err)
	}
	c.base = ctx
	defer func() {
		for _, cancel := range c.cancels {
			cancel()
		}
	}()
	ctx = c.timed()
	if !cmd.noDB {
		if err := c.connect(ctx, cmd.usesRedis(&c.o)); err != nil {
			return c.fail(cmd, err)
		}
		defer c.close()
	}
	if err := cmd.run(c, ctx, pos); err != nil {
		return c.fail(cmd, err)
	}
	return exitOK
}

func findCommand(name string) *command {
	for _, c := range commands {
		if c.name == name {
			return c
		}
	}
	return nil
}

func printCommandHelp(w io.Writer, cmd *command) {
	fmt.Fprintf(w, "Usage: idemctl %s [flags] %s\n\n%s.\n", cmd.name, cmd.args, cmd.summary)
	if h, ok := commandHelp[cmd.name]; ok {
		fmt.Fprintf(w, "\n%s", h)
	}
	fmt.Fprintln(w, "\nFlags:")
	c := &cli{args: args{getenv: func(string) string { return "" }}}
	fs := c.flagSet(cmd)
	fs.SetOutput(w)
	fs.PrintDefaults()
	fmt.Fprint(w, "\nExit codes: 0 done, 1 error, 2 usage, 3 not found, 4 refused (nothing changed).\n")
}

// commandHelp explains what a command does beyond its summary.
var commandHelp = map[string]string{
	"inspect": `Shows the record as stored and, with --redis, the lock and the cached result, and says what a new
attempt with the key would get now (run, replay, 409 in flight, takeover...). Exit 3 when there is no
record (the scope is unknown, or the key has none).
`,
	"list": `Filters combine (AND). Records are read in pages of 500 in (scope, key) order, or, with --status
or --stuck, by expiry then (scope, key) (the order of the table's status index, so each page reads
only its own rows); progress is shown on a terminal. --stuck lists the claims whose holder died or stalled: without a gid the sweeper
recovers them, with one the reconciler settles them.
`,
	"stats": `The table cannot count duplicates: a replay writes nothing. With --metrics (the /metrics URLs of
every instance of the application, Prometheus format from idemkit's OpenTelemetry instruments), the
duplicate rate per scope is computed from the counter idemkit_calls_total since the instances started:
  duplicates = calls with outcome replayed, in_flight, mismatch or duplicate
  rate       = duplicates / (duplicates + calls with outcome executed or detached)
For a rate over a time window use the Grafana dashboard (deploy/grafana/idemkit.json).
"taken over" counts records whose fence is above 1 (taken over, recovered by the sweeper or released
at least once); "expired" records count as absent and await the sweeper.
`,
	"release": `Release makes a stuck PROCESSING claim FAILED with fence + 1 and no owner, as the sweeper's recovery
does: the next attempt with the key runs again, and the stalled holder can never finish (its fenced
write fails). The write is conditioned on the record as read (fence, owner, status): if it changed
in between, nothing is written (exit 4). With --redis the holder's lock is deleted too; without it
the lock stays until it expires (a retry is answered in flight until then), and nothing can delete it
later: the released record names no owner. The question and the report say so.

Refused without --force: a claim whose lease has not run out (its holder may still be running; the
work could then run twice), and a claim carrying a gid — its outcome belongs to the global
transaction: look at it with 'idemctl dtm GID'; the reconciler settles it from DTM's answer.
`,
	"purge": `With SCOPE KEY, deletes that record; with filters (at least one of --scope --status --stuck
--older-than --gid), every matching record up to --limit (the report says when more than --limit
matched; --json: limit_reached). Each delete is conditioned on the record as
read (fence, owner, status): a record that changed in between is left alone and counted. The key is
new again afterwards: the next attempt runs. With --redis the cached result is deleted too, and a
claim's holder's lock; without it a SUCCEEDED or REJECTED record's cached result may still be replayed
until it expires (only those are cached), and a claim's holder's lock stays until it expires. Live claims and claims carrying a gid are
skipped unless --force, and so are finished records an attempt may still run or answer under: with
--redis, a SUCCEEDED or REJECTED record whose key is locked (its holder would cache it again as it
ends); without it, a mark (Mark mode writes it before its function runs) written less than --lease
ago. Exit 4 when any record was left alone. A purge forgets the record's fence
count: the next claim starts again at fence 1, so a stalled holder of a purged claim (still running
after its lease) is no longer outranked by fence — release a stuck claim instead while its holder
may be alive.
`,
	"sweep": `--dry-run lists what one sweeper pass (package sweep with sweep.RecordTasks) would do now: delete
expired records, recover stale claims (FAILED, fence + 1), and — for claims carrying a gid — leave
them to the reconciler. Without --dry-run it runs DeleteExpired and RecoverStale over the whole
table (refused with --namespace), up to --limit records each, after confirmation; the report says
when a limit was reached and more may be left (--json: limit_reached). With --redis it recovers as
sweep.RecordTasksWithLocker does: the lock a recovered claim's dead holder still holds (a LockTTL
longer than the Lease) is deleted too, so the retry runs at once instead of answering in flight
until the lock expires; a lock it could not delete is reported (exit 1), the recovery stands.
`,
	"dtm": `Asks DTM (--dtm) for the global transaction's status and lists the records carrying its gid, with
what that means (e.g. DTM says succeed but a record is still PROCESSING: the reconciler settles it
once its lease runs out). The gid column has no index: the table is scanned. Exit 3 when DTM does not
know the gid and no record carries it.
`,
}

// parseInterleaved parses flags anywhere among the positional arguments (flag stops at the first
// positional one); everything after "--" is positional.
func parseInterleaved(fs *flag.FlagSet, argv []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(argv); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if consumed := argv[:len(argv)-len(rest)]; len(consumed) > 0 && consumed[len(consumed)-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		argv = rest[1:]
	}
}

// fail prints err and returns its exit code.
func (c *cli) fail(cmd *command, err error) int {
	if te := c.timedOut(); te != nil {
		err = fmt.Errorf("%w (%w)", err, te)
	}
	code := exitCode(err)
	msg := err.Error()
	if c.o.json && !c.printed && code != exitUsage {
		c.writeJSON(map[string]any{"error": msg, "exit_code": code})
	}
	hint := ""
	if code == exitUsage {
		hint = fmt.Sprintf(" (idemctl %s --help)", cmd.name)
	}
	fmt.Fprintf(c.stderr, "idemctl %s: %s%s\n", cmd.name, msg, hint)
	return code
}

// exitCode maps an error to the exit code it means.
func exitCode(err error) int {
	var ue *usageError
	switch {
	case errors.As(err, &ue), errors.Is(err, idemkit.ErrInvalidKey):
		return exitUsage
	case errors.Is(err, idemkit.ErrNotFound), errors.Is(err, admin.ErrUnknownScope), errors.Is(err, errNotFound):
		return exitNotFound
	case errors.Is(err, admin.ErrRefused), errors.Is(err, idemkit.ErrFenced), errors.Is(err, errNotConfirmed):
		return exitRefused
	}
	return exitError
}

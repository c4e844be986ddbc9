package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/glebarez/sqlite"
	mysqldrv "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/admin"
	"github.com/idemkit/idemkit/internal/netaddr"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/record"
)

// httpURL reports whether s is an absolute http or https URL with a host, and a port from 1 to
// 65535 if any: what --dtm and --metrics take. A host:port without a scheme parses as a URL of scheme
// "host", and url.Parse takes any digits for a port: both would fail only when requested, as a server
// that cannot be reached.
func httpURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Hostname() != "" &&
		(u.Port() == "" || netaddr.ValidPort(u.Port()))
}

// opts are the parsed flags of one invocation.
type opts struct {
	db, table, namespace, redis, redisPrefix, dtm, metrics string
	maxKeyLen                                              int
	timeout, lease                                         time.Duration
	json                                                   bool

	filter  admin.Filter
	status  string
	preview int
	yes     bool
	force   bool
	reason  string
	dryRun  bool

	envErrs []error // environment variables that could not be parsed
}

// cli is one invocation: its world, flags and connections.
type cli struct {
	args
	o   opts
	adm *admin.Admin
	gdb *gorm.DB
	rdb redis.UniversalClient
	// printed: a JSON document was written to stdout; an error then goes to stderr only.
	printed bool
	// base is the command's context without --timeout (cancelled by an interrupt); cancels end the
	// timed contexts made from it.
	base    context.Context
	cancels []context.CancelFunc
	// timedCtx is the context bounded by --timeout the command works on now (nil while it waits for
	// a confirmation): fail says when --timeout ended it.
	timedCtx context.Context
}

// flagSet returns the flags of cmd: the connection flags (defaults from the environment) and its own.
func (c *cli) flagSet(cmd *command) *flag.FlagSet {
	fs := flag.NewFlagSet("idemctl "+cmd.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // a parse error is returned and reported once, by run
	fs.Usage = func() {}
	env := func(name, def string) string {
		if v := c.getenv(name); v != "" {
			return v
		}
		return def
	}
	o := &c.o
	fs.StringVar(&o.db, "db", env("IDEMCTL_DB", ""), "database: mysql://<go-sql-driver DSN>, postgres://<URL>, sqlite://<path> (env IDEMCTL_DB)")
	fs.StringVar(&o.table, "table", env("IDEMCTL_TABLE", record.DefaultTable), "record table (env IDEMCTL_TABLE)")
	fs.StringVar(&o.namespace, "namespace", env("IDEMCTL_NAMESPACE", ""), "the application's idemkit namespace (env IDEMCTL_NAMESPACE)")
	fs.IntVar(&o.maxKeyLen, "max-key-len", c.envInt("IDEMCTL_MAX_KEY_LEN", idemkit.DefaultMaxKeyLen), "the application's MaxKeyLen (env IDEMCTL_MAX_KEY_LEN)")
	fs.StringVar(&o.redis, "redis", env("IDEMCTL_REDIS", ""), "Redis of the application's lock: host:port or redis://... (env IDEMCTL_REDIS)")
	fs.StringVar(&o.redisPrefix, "redis-prefix", env("IDEMCTL_REDIS_PREFIX", lock.DefaultPrefix), "the lock's key prefix (env IDEMCTL_REDIS_PREFIX)")
	fs.DurationVar(&o.timeout, "timeout", c.envDuration("IDEMCTL_TIMEOUT", 30*time.Second), "bound on the whole command (env IDEMCTL_TIMEOUT)")
	fs.BoolVar(&o.json, "json", false, "JSON output on stdout")
	switch cmd.name {
	case "dtm":
		fs.StringVar(&o.dtm, "dtm", env("IDEMCTL_DTM", ""), "DTM's HTTP API, e.g. http://127.0.0.1:36789/api/dtmsvr (env IDEMCTL_DTM)")
	case "stats":
		fs.StringVar(&o.metrics, "metrics", env("IDEMCTL_METRICS", ""), "comma-separated /metrics URLs of the application's instances, for the duplicate rate (env IDEMCTL_METRICS)")
	}
	o.filter.Limit = admin.DefaultLimit // for commands without --limit
	if cmd.flags != nil {
		cmd.flags(fs, o)
	}
	return fs
}

func (c *cli) envInt(name string, def int) int {
	v := c.getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		c.o.envErrs = append(c.o.envErrs, fmt.Errorf("%s=%q: not a number", name, v))
		return def
	}
	return n
}

func (c *cli) envDuration(name string, def time.Duration) time.Duration {
	v := c.getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		c.o.envErrs = append(c.o.envErrs, fmt.Errorf("%s=%q: not a duration (e.g. 30s)", name, v))
		return def
	}
	return d
}

// validate checks the command line before anything is opened.
func (c *cli) validate(cmd *command, pos []string) error {
	o := &c.o
	if len(o.envErrs) > 0 {
		return &usageError{errors.Join(o.envErrs...).Error()}
	}
	switch {
	case cmd.positional == 0 && len(pos) != 0:
		return usagef("want no arguments, got %d", len(pos))
	case cmd.positional > 0 && len(pos) != cmd.positional:
		return usagef("want %d argument(s) %s, got %d", cmd.positional, cmd.args, len(pos))
	case cmd.positional < 0 && len(pos) != 0 && len(pos) != 2:
		return usagef("want SCOPE KEY or filters, got %d argument(s)", len(pos))
	case o.timeout <= 0:
		return usagef("--timeout must be positive, got %s", o.timeout)
	case o.maxKeyLen < 1:
		return usagef("--max-key-len must be positive, got %d", o.maxKeyLen)
	case o.filter.OlderThan < 0:
		return usagef("--older-than must not be negative, got %s", o.filter.OlderThan)
	case cmd.name == "purge" && o.lease <= 0:
		return usagef("--lease must be positive (the application's Options.Lease), got %s", o.lease)
	case o.filter.Limit < 1:
		return usagef("--limit must be positive, got %d", o.filter.Limit)
	case o.preview < 0:
		return usagef("--preview must not be negative, got %d", o.preview)
	}
	if err := o.checkLengths(cmd, pos); err != nil {
		return err
	}
	if o.filter.GID != "" {
		if err := admin.CheckGID(o.filter.GID); err != nil {
			return usagef("--gid: %v", err)
		}
	}
	if cmd.name == "dtm" && len(pos) == 1 {
		if pos[0] == "" { // a record's empty gid means none; DTM knows no such transaction
			return usagef("GID: empty")
		}
		if err := admin.CheckGID(pos[0]); err != nil {
			return usagef("GID: %v", err)
		}
	}
	if o.reason != "" {
		if err := admin.CheckBy(c.who()); err != nil { // "idemctl (user@host): <reason>", as Release gets it
			return usagef("--reason: %v", err)
		}
	}
	if o.status != "" {
		st := idemkit.Status(strings.ToUpper(o.status))
		if !st.Valid() {
			return usagef("--status %q: want PROCESSING, SUCCEEDED, FAILED or REJECTED", o.status)
		}
		o.filter.Status = st
	}
	if o.filter.Stuck && o.filter.Status != "" && o.filter.Status != idemkit.StatusProcessing {
		return usagef("--stuck selects PROCESSING records: it conflicts with --status %s", o.filter.Status)
	}
	if cmd.name == "purge" {
		filtered := o.filter.Scope != "" || o.filter.Status != "" || o.filter.Stuck || o.filter.OlderThan > 0 || o.filter.GID != ""
		switch {
		case len(pos) == 2 && filtered:
			return usagef("SCOPE KEY and filters (--scope --status --stuck --older-than --gid) conflict: give one or the other")
		case len(pos) == 0 && !filtered:
			return usagef("purge needs SCOPE KEY or at least one filter (--scope --status --stuck --older-than --gid)")
		}
	}
	if cmd.name == "sweep" && !o.dryRun && o.namespace != "" {
		return usagef("a sweep works on the whole table, every namespace's records: run it without --namespace (--dry-run may have one)")
	}
	if cmd.name == "dtm" && o.dtm == "" {
		return usagef("dtm needs DTM's HTTP API: --dtm or IDEMCTL_DTM, e.g. http://127.0.0.1:36789/api/dtmsvr")
	}
	if cmd.name == "dtm" && !httpURL(o.dtm) {
		return usagef("--dtm %q: want http://host:36789/api/dtmsvr", o.dtm)
	}
	if cmd.name == "stats" {
		for _, u := range strings.Split(o.metrics, ",") {
			if u = strings.TrimSpace(u); u != "" && !httpURL(u) {
				return usagef("--metrics %q: want http://host:8080/metrics", u)
			}
		}
	}
	if o.redis != "" { // checked for every command, also those that never connect to it
		rc, err := redisClient(o.redis)
		if err != nil {
			return err
		}
		_ = rc.Close() // never dialled
	}
	if o.db == "" {
		return usagef("no database: set --db or IDEMCTL_DB (mysql://..., postgres://..., sqlite://...)")
	}
	if _, err := dialector(o.db); err != nil {
		return err
	}
	return nil
}

// checkLengths returns a usage error naming --max-key-len for a scope or key (SCOPE KEY, --scope)
// longer than it: the Guard refuses such a value as an invalid key, yet an application whose MaxKeyLen
// is above idemctl's (the default 255, unless told) accepts and stores it.
func (o *opts) checkLengths(cmd *command, pos []string) error {
	given := []struct{ name, v string }{{"--scope", o.filter.Scope}}
	if strings.Contains(cmd.args, "SCOPE KEY") && len(pos) == 2 {
		given = append(given, struct{ name, v string }{"SCOPE", pos[0]}, struct{ name, v string }{"KEY", pos[1]})
	}
	for _, g := range given {
		if len(g.v) > o.maxKeyLen {
			return usagef("%s: %d bytes, longer than %d (--max-key-len): if the application takes it, give its idemkit.Options.MaxKeyLen with --max-key-len or IDEMCTL_MAX_KEY_LEN",
				g.name, len(g.v), o.maxKeyLen)
		}
	}
	return nil
}

// dialector returns the gorm dialector of a DSN, or a usage error saying what is wrong with it. It
// opens nothing. SQLite files must exist: idemctl never creates a database.
func dialector(dsn string) (gorm.Dialector, error) {
	scheme, rest, ok := strings.Cut(dsn, "://")
	if !ok {
		return nil, usagef("--db %s: want mysql://<DSN>, postgres://<URL> or sqlite://<path>", redact(dsn))
	}
	switch scheme {
	case "mysql":
		cfg, err := mysqldrv.ParseDSN(rest)
		if err != nil {
			return nil, usagef("--db %s: %v", redact(dsn), err)
		}
		// go-sql-driver dials "tcp(:3306)" (an unset variable in "tcp(${DB_HOST}:3306)") on localhost:
		// another database than the application's.
		if host, port, err := net.SplitHostPort(cfg.Addr); cfg.Net == "tcp" && err == nil {
			switch {
			case host == "":
				return nil, usagef("--db %s: no host in tcp(%s): want tcp(host:port)", redact(dsn), cfg.Addr)
			case !netaddr.ValidPort(port):
				return nil, usagef("--db %s: port %q in tcp(%s): want a number from 1 to 65535", redact(dsn), port, cfg.Addr)
			}
		}
		if cfg.Timeout == 0 {
			cfg.Timeout = 5 * time.Second
		}
		// No SELECT VERSION() at open: gorm's dialector sends it on a context of its own, which
		// neither --timeout nor an interrupt ends (a server that accepts connections and never
		// answers held idemctl for as long as the connection stayed open). idemctl's statements are
		// its own SQL, which the version does not change; the first goes out on the command's context.
		return mysql.New(mysql.Config{DSNConfig: cfg, SkipInitializeWithVersion: true}), nil
	case "postgres", "postgresql":
		// Appended to the URL as given: re-encoding it (url.URL.String) drops the "//" of a URL
		// without host, user or path (postgres://?host=db&dbname=shop), which pgx then reads as
		// keyword=value pairs.
		if u, err := url.Parse(dsn); err == nil && !u.Query().Has("connect_timeout") {
			base, fragment, hasFragment := strings.Cut(dsn, "#")
			sep := "&"
			if u.RawQuery == "" {
				sep = "?"
				base = strings.TrimSuffix(base, "?")
			}
			dsn = base + sep + "connect_timeout=5"
			if hasFragment {
				dsn += "#" + fragment
			}
		}
		if _, err := pgx.ParseConfig(dsn); err != nil {
			return nil, usagef("--db %s: %s", redact(dsn), hideQueryPassword(err.Error())) // pgx quotes the URL
		}
		return postgres.Open(dsn), nil
	case "sqlite":
		path, query, _ := strings.Cut(rest, "?")
		if path == "" {
			return nil, usagef("--db %s: no file path", dsn)
		}
		st, err := os.Stat(path)
		if err != nil {
			return nil, &connectError{fmt.Errorf("--db %s: %w (idemctl opens an existing database only)", dsn, err)}
		}
		if st.IsDir() {
			return nil, usagef("--db %s: a directory, not a database file", dsn)
		}
		if query == "" {
			query = "_pragma=busy_timeout(5000)"
		}
		if !strings.Contains(query, "mode=") {
			query += "&mode=rw" // never create a database
		}
		// In a "file:" URI SQLite decodes %XX and ends the path at '#': escape both.
		return sqlite.Open("file:" + strings.NewReplacer("%", "%25", "#", "%23").Replace(path) + "?" + query), nil
	}
	return nil, usagef("--db %s: unknown scheme %q: want mysql, postgres or sqlite", redact(dsn), scheme)
}

// queryPassword is the password parameter of a URL's query (PostgreSQL's postgres://...?password=).
var queryPassword = regexp.MustCompile("(?i)([?&]password=)[^&#\\s`]*")

// hideQueryPassword replaces the value of every password parameter in s with ****.
func hideQueryPassword(s string) string { return queryPassword.ReplaceAllString(s, "${1}****") }

// connectError is a failure to reach a service (exit 1), found while checking the command line.
type connectError struct{ err error }

func (e *connectError) Error() string { return e.err.Error() }
func (e *connectError) Unwrap() error { return e.err }

// redact hides the password of a DSN "scheme://user:password@..." and of a URL's query parameter
// "password=...".
func redact(dsn string) string {
	dsn = hideQueryPassword(dsn)
	scheme, rest, ok := strings.Cut(dsn, "://")
	if !ok {
		scheme, rest = "", dsn
	}
	at := strings.LastIndex(rest, "@")
	colon := strings.Index(rest, ":")
	if at < 0 || colon < 0 || colon > at {
		return dsn
	}
	out := rest[:colon+1] + "****" + rest[at:]
	if scheme != "" {
		out = scheme + "://" + out
	}
	return out
}

// connect opens the database (and, for a command that uses it, Redis) and checks the table.
func (c *cli) connect(ctx context.Context, useRedis bool) error {
	d, err := dialector(c.o.db)
	if err != nil {
		return err
	}
	c.gdb, err = gorm.Open(d, &gorm.Config{Logger: logger.Discard, DisableAutomaticPing: true})
	if err != nil {
		return fmt.Errorf("opening %s: %w", redact(c.o.db), err)
	}
	if sqlDB, err := c.gdb.DB(); err == nil {
		sqlDB.SetMaxOpenConns(2)
	}
	if c.o.redis != "" && useRedis {
		if c.rdb, err = redisClient(c.o.redis); err != nil {
			return err
		}
		if err := c.rdb.Ping(ctx).Err(); err != nil {
			return fmt.Errorf("connecting to Redis %s: %w", redact(c.o.redis), err)
		}
	}
	ao := &admin.Options{Table: c.o.table, Namespace: c.o.namespace, MaxKeyLen: c.o.maxKeyLen, RedisPrefix: c.o.redisPrefix, Lease: c.o.lease, Now: c.now}
	if c.rdb != nil {
		ao.Redis = c.rdb
	}
	if c.adm, err = admin.New(c.gdb, ao); err != nil {
		return &usageError{err.Error()}
	}
	if err := c.adm.Check(ctx); err != nil {
		if errors.Is(err, admin.ErrNoTable) {
			return fmt.Errorf("%w (is --table %q right? is this the application's database?)", err, c.o.table)
		}
		return fmt.Errorf("%s: %w", redact(c.o.db), err)
	}
	return nil
}

// redisClient returns a client of --redis: host:port or a redis:// URL for one server, or several
// host:port separated by commas for the seed nodes of a Redis Cluster (the application's lock.Locker
// writes the same keys, hash-tagged, on either).
func redisClient(spec string) (redis.UniversalClient, error) {
	const dial, retries = 3 * time.Second, 1
	if strings.Contains(spec, ",") {
		var addrs []string
		for _, a := range strings.Split(spec, ",") {
			a = strings.TrimSpace(a)
			if a == "" || strings.Contains(a, "://") {
				return nil, usagef("--redis %s: a Redis Cluster is given as host:port,host:port,... (its seed nodes)", redact(spec))
			}
			if err := checkRedisAddr(spec, a); err != nil {
				return nil, err
			}
			addrs = append(addrs, a)
		}
		return redis.NewClusterClient(&redis.ClusterOptions{
			Addrs: addrs, ContextTimeoutEnabled: true, DialTimeout: dial, MaxRetries: retries,
		}), nil
	}
	ro := &redis.Options{Addr: spec}
	if !strings.Contains(spec, "://") {
		if err := checkRedisAddr(spec, spec); err != nil {
			return nil, err
		}
	} else {
		var err error
		if ro, err = redis.ParseURL(spec); err != nil {
			return nil, usagef("--redis %s: %v", redact(spec), err)
		}
		// go-redis takes a URL without a host for localhost: the application's Redis is never that by
		// default, so a host left out (an unset variable in redis://${HOST}:6379) is a bad command line.
		if u, err := url.Parse(spec); err == nil && (u.Scheme == "redis" || u.Scheme == "rediss") {
			if u.Hostname() == "" {
				return nil, usagef("--redis %s: no host: want redis://host:6379", redact(spec))
			}
			if err := checkRedisAddr(spec, ro.Addr); err != nil {
				return nil, err
			}
		}
	}
	ro.ContextTimeoutEnabled = true
	ro.DialTimeout = dial
	ro.MaxRetries = retries
	return redis.NewClient(ro), nil
}

// checkRedisAddr returns a usage error when addr, given in --redis spec, is not host:port with a
// usable port. go-redis dials an address without a host (":6379", an unset variable in
// "$REDIS_HOST:6379") on localhost, another Redis than the application's, which idemctl would then
// read and clear as if it were.
func checkRedisAddr(spec, addr string) error {
	host, port, err := net.SplitHostPort(addr)
	switch {
	case err != nil || port == "":
		return usagef("--redis %s: %q: want host:port", redact(spec), addr)
	case host == "":
		return usagef("--redis %s: no host in %q: want host:port", redact(spec), addr)
	case !netaddr.ValidPort(port):
		return usagef("--redis %s: port %q in %q: want a number from 1 to 65535", redact(spec), port, addr)
	}
	return nil
}

func (c *cli) close() {
	if c.rdb != nil {
		_ = c.rdb.Close()
	}
	if c.gdb != nil {
		if sqlDB, err := c.gdb.DB(); err == nil {
			_ = sqlDB.Close()
		}
	}
}

// isTerminal reports whether f is a character device (a terminal), without a dependency.
func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

package main

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	mysqldrv "github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idemkit/internal/netaddr"
)

// Defaults of [Config].
const (
	DefaultServeListen    = "127.0.0.1:8080"
	DefaultTourListen     = "127.0.0.1:0" // any free loopback port
	DefaultWait           = 5 * time.Second
	DefaultRetryInterval  = time.Second
	DefaultTimeoutToFail  = 30 * time.Second
	DefaultSweepInterval  = 2 * time.Second
	DefaultRedisPrefix    = "idemkit-demo:"
	DefaultServeDataDir   = "data"
	DefaultStartupTimeout = time.Minute
)

// envPrefix starts every environment variable the program reads.
const envPrefix = "IDEMKIT_DEMO_"

// Config configures the services. The zero value plus a DataDir works: SQLite in DataDir, in-process
// lock and cache, a DTM server child process. [Config.withDefaults] fills the rest.
type Config struct {
	// Listen is the address the HTTP server binds. Defaults to DefaultServeListen.
	Listen string
	// PublicURL is the base URL DTM uses to call the branch handlers back (and the initiator uses to
	// call the TCC tries). Defaults to http://<the bound listen address>, on 127.0.0.1 when it listens
	// on all interfaces.
	PublicURL string
	// DB is the business database: "" (SQLite file shop.db in DataDir), "sqlite://<path>" or
	// "mysql://<go-sql-driver DSN>", e.g. mysql://root:pw@tcp(127.0.0.1:3306)/shop.
	DB string
	// Redis is the Redis address (host:port or a redis:// URL) for the lock, the result cache and the
	// sweeper's lock. Defaults to "": in-process lock and cache.
	Redis string
	// DTM is the HTTP API base of an external DTM server, e.g. http://127.0.0.1:36789/api/dtmsvr.
	// Defaults to "": a DTM server child process, built on first use.
	DTM string
	// DataDir holds the SQLite file and the DTM child process's store (dtm/dtm.bolt), so services
	// restarted on the same DataDir — after a stop or a crash — resume the global transactions in
	// flight. Required when DB is "". Without it (MySQL and no DataDir), a DTM child process keeps its
	// store in a temporary directory, lost when it stops.
	DataDir string
	// Wait bounds how long an order request waits for the global transaction's outcome before it
	// answers PENDING. Defaults to DefaultWait.
	Wait time.Duration
	// ReconcileAfter is how long an order's outcome may stay unknown before the reconciler asks DTM
	// (the lease of the transaction records). Defaults to 2*Wait + 5s; must exceed Wait.
	ReconcileAfter time.Duration
	// SweepInterval is how often the sweeper (reconciler, expired records, old barrier rows) runs.
	// Defaults to DefaultSweepInterval.
	SweepInterval time.Duration
	// RetryInterval is DTM's retry interval for a branch that answered neither success nor failure
	// (whole seconds, at least 1). Defaults to DefaultRetryInterval.
	RetryInterval time.Duration
	// TimeoutToFail is how long DTM lets a TCC stay unfinished before it cancels it (whole seconds).
	// Defaults to DefaultTimeoutToFail.
	TimeoutToFail time.Duration
	// TablePrefix starts every table name (orders, accounts, inventory, idemkit_records, barrier).
	// Defaults to "". Letters, digits and underscores.
	TablePrefix string
	// RedisPrefix starts every Redis key. Defaults to DefaultRedisPrefix.
	RedisPrefix string
	// StartupTimeout bounds the wait for the database and Redis to answer at start. Defaults to
	// DefaultStartupTimeout.
	StartupTimeout time.Duration
	// LogLevel is debug, info, warn or error. Defaults to info.
	LogLevel string
}

var tablePrefixRE = regexp.MustCompile(`^[A-Za-z0-9_]{0,32}$`)

// withDefaults returns a copy of c with defaults filled in, or an error naming every invalid field.
func (c Config) withDefaults() (Config, error) {
	if c.Listen == "" {
		c.Listen = DefaultServeListen
	}
	if c.Wait == 0 {
		c.Wait = DefaultWait
	}
	if c.ReconcileAfter == 0 {
		c.ReconcileAfter = 2*c.Wait + 5*time.Second
	}
	if c.SweepInterval == 0 {
		c.SweepInterval = DefaultSweepInterval
	}
	if c.RetryInterval == 0 {
		c.RetryInterval = DefaultRetryInterval
	}
	if c.TimeoutToFail == 0 {
		c.TimeoutToFail = DefaultTimeoutToFail
	}
	if c.RedisPrefix == "" {
		c.RedisPrefix = DefaultRedisPrefix
	}
	if c.StartupTimeout == 0 {
		c.StartupTimeout = DefaultStartupTimeout
	}
	if c.LogLevel == "" {
		c.LogLevel = "info"
	}
	c.PublicURL = strings.TrimRight(c.PublicURL, "/")
	c.DTM = strings.TrimRight(c.DTM, "/")

	var errs []error
	if c.Wait < 0 {
		errs = append(errs, fmt.Errorf("wait must be positive, got %s", c.Wait))
	}
	if c.ReconcileAfter <= c.Wait {
		errs = append(errs, fmt.Errorf("reconcile-after (%s) must be longer than wait (%s)", c.ReconcileAfter, c.Wait))
	}
	if c.SweepInterval < time.Millisecond {
		errs = append(errs, fmt.Errorf("sweep-interval must be at least 1ms, got %s", c.SweepInterval))
	}
	if c.RetryInterval < time.Second {
		errs = append(errs, fmt.Errorf("retry-interval must be at least 1s (DTM counts whole seconds), got %s", c.RetryInterval))
	}
	if c.TimeoutToFail < time.Second {
		errs = append(errs, fmt.Errorf("timeout-to-fail must be at least 1s, got %s", c.TimeoutToFail))
	}
	if !tablePrefixRE.MatchString(c.TablePrefix) {
		errs = append(errs, fmt.Errorf("table-prefix %q: at most 32 letters, digits and underscores", c.TablePrefix))
	}
	if strings.ContainsAny(c.RedisPrefix, "{}") {
		errs = append(errs, fmt.Errorf("redis-prefix %q must not contain '{' or '}'", c.RedisPrefix))
	}
	if c.DB == "" && c.DataDir == "" {
		errs = append(errs, errors.New("data-dir is needed for the default SQLite database"))
	}
	if err := checkDB(c.DB); err != nil {
		errs = append(errs, err)
	}
	if c.PublicURL != "" && !httpURL(c.PublicURL) {
		errs = append(errs, fmt.Errorf("public-url %q: want http://host:port", c.PublicURL))
	}
	if c.DTM != "" && !httpURL(c.DTM) {
		errs = append(errs, fmt.Errorf("dtm %q: want http://host:36789/api/dtmsvr", c.DTM))
	}
	if err := checkRedisAddress(c.Redis); err != nil {
		errs = append(errs, err)
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		errs = append(errs, fmt.Errorf("log-level %q: want debug, info, warn or error", c.LogLevel))
	}
	if err := errors.Join(errs...); err != nil {
		return Config{}, fmt.Errorf("invalid configuration: %w", err)
	}
	return c, nil
}

// checkDB refuses a Config.DB that is neither "" nor sqlite://<path> nor a mysql://<DSN> the driver
// parses, with a host and a usable port when it dials TCP: caught at start, before anything runs,
// rather than when the database is opened (sqlite:// without a path, an unset variable in
// sqlite://$DB_PATH, would keep the data in a file named after the connection's query string,
// "?_pragma=...", in the working directory).
func checkDB(db string) error {
	switch {
	case db == "":
		return nil
	case strings.HasPrefix(db, "sqlite://"):
		if strings.TrimPrefix(db, "sqlite://") == "" {
			return fmt.Errorf("db %q: no path: want sqlite://<path>", db)
		}
		return nil
	case strings.HasPrefix(db, "mysql://"):
		dc, err := mysqldrv.ParseDSN(strings.TrimPrefix(db, "mysql://"))
		if err != nil {
			return fmt.Errorf("db %q: %w", redactDSN(db), err)
		}
		if dc.Net == "tcp" && !netaddr.HostPort(dc.Addr) {
			return fmt.Errorf("db %q: tcp(%s): want tcp(host:port)", redactDSN(db), dc.Addr)
		}
		return nil
	}
	return fmt.Errorf("db %q: want sqlite://<path> or mysql://<DSN>", redactDSN(db))
}

// httpURL reports whether s is an http:// or https:// URL with a host, and a usable port if it names
// one: DTM is called on it, or calls the branches back on it.
func httpURL(s string) bool {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
		return false
	}
	if p := u.Port(); p != "" {
		return netaddr.ValidPort(p)
	}
	return !strings.HasSuffix(u.Host, ":")
}

// checkRedisAddress refuses a Config.Redis that is neither host:port nor a redis:// (rediss://) URL, which
// would otherwise be dialled until the start-up timeout, as if Redis were down.
func checkRedisAddress(addr string) error {
	if addr == "" {
		return nil
	}
	if strings.Contains(addr, "://") {
		if _, err := redis.ParseURL(addr); err != nil {
			return fmt.Errorf("redis %q: %w", redactDSN(addr), err)
		}
		return nil
	}
	host, port, err := net.SplitHostPort(addr)
	if n, perr := strconv.Atoi(port); err != nil || host == "" || perr != nil || n < 1 || n > 65535 {
		return fmt.Errorf("redis %q: want host:port or redis://host:port/db", addr)
	}
	return nil
}

// redactDSN hides the password of a DSN "user:password@...".
func redactDSN(dsn string) string {
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

// flagSet binds c's fields to flags whose defaults come from the environment (IDEMKIT_DEMO_*), so a
// flag overrides its variable, which overrides the built-in default. tour selects the tour's defaults.
func (c *Config) flagSet(name string, tour bool, keep *bool) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	listen := DefaultServeListen
	dataDir := DefaultServeDataDir
	if tour {
		listen = DefaultTourListen
		dataDir = ""
	}
	str := func(p *string, flagName, env, def, usage string) {
		fs.StringVar(p, flagName, envOr(env, def), usage+" (env "+envPrefix+env+")")
	}
	dur := func(p *time.Duration, flagName, env string, def time.Duration, usage string) {
		v := def
		if s := os.Getenv(envPrefix + env); s != "" {
			if d, err := time.ParseDuration(s); err == nil {
				v = d
			} // else refused by envErrors unless the flag is given
		}
		fs.DurationVar(p, flagName, v, usage+" (env "+envPrefix+env+")")
	}
	str(&c.Listen, "listen", "LISTEN", listen, "address to listen on")
	str(&c.PublicURL, "public-url", "PUBLIC_URL", "", "URL DTM uses to call the branches back (default http://<listen address>)")
	str(&c.DB, "db", "DB", "", "database: sqlite://<path> or mysql://<DSN> (default SQLite in the data directory)")
	str(&c.Redis, "redis", "REDIS", "", "Redis address for lock and cache, host:port or redis://... (default in-process)")
	str(&c.DTM, "dtm", "DTM", "", "external DTM server, http://host:36789/api/dtmsvr (default: build and run one as a child process)")
	dataUsage := "directory of the SQLite file and the DTM child process's store (dtm/dtm.bolt)"
	if tour {
		dataUsage += " (default a fresh temporary directory, removed afterwards unless -keep)"
	}
	str(&c.DataDir, "data-dir", "DATA_DIR", dataDir, dataUsage)
	dur(&c.Wait, "wait", "WAIT", DefaultWait, "how long an order request waits for the outcome before answering PENDING")
	dur(&c.ReconcileAfter, "reconcile-after", "RECONCILE_AFTER", 0, "how long an outcome may stay unknown before the reconciler asks DTM (default 2*wait+5s)")
	dur(&c.SweepInterval, "sweep-interval", "SWEEP_INTERVAL", DefaultSweepInterval, "how often the sweeper and reconciler run")
	dur(&c.RetryInterval, "retry-interval", "RETRY_INTERVAL", DefaultRetryInterval, "DTM's retry interval for a branch that failed temporarily")
	dur(&c.TimeoutToFail, "timeout-to-fail", "TIMEOUT_TO_FAIL", DefaultTimeoutToFail, "how long DTM lets a TCC stay unfinished before cancelling it")
	str(&c.TablePrefix, "table-prefix", "TABLE_PREFIX", "", "prefix of every table name")
	str(&c.RedisPrefix, "redis-prefix", "REDIS_PREFIX", DefaultRedisPrefix, "prefix of every Redis key")
	str(&c.LogLevel, "log-level", "LOG_LEVEL", map[bool]string{true: "warn", false: "info"}[tour], "debug, info, warn or error")
	if keep != nil {
		fs.BoolVar(keep, "keep", false, "keep the temporary data directory and print its path")
	}
	return fs
}

// envErrors reports the duration variables (IDEMKIT_DEMO_WAIT, ...) that do not parse, of the flags of
// fs (parsed) not given on the command line: such a variable is refused as its flag would be, rather
// than leaving the default in effect. The variable of a flag is its name upper-cased, '-' as '_'.
func envErrors(fs *flag.FlagSet) error {
	given := make(map[string]bool)
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		g, ok := f.Value.(flag.Getter)
		if !ok || given[f.Name] {
			return
		}
		if _, isDuration := g.Get().(time.Duration); !isDuration {
			return
		}
		name := envPrefix + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if s := os.Getenv(name); s != "" {
			if _, err := time.ParseDuration(s); err != nil {
				errs = append(errs, fmt.Errorf("invalid value %q for %s: %w", s, name, err))
			}
		}
	})
	return errors.Join(errs...)
}

// envOr returns the variable envPrefix+name, or def when it is unset or empty: an empty variable (NAME=
// in a compose file, a script exporting what it may not have) means the default, as for the durations.
func envOr(name, def string) string {
	if v := os.Getenv(envPrefix + name); v != "" {
		return v
	}
	return def
}

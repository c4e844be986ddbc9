package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestConfigDefaults(t *testing.T) {
	c, err := Config{DataDir: "d"}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	want := Config{
		Listen: DefaultServeListen, DataDir: "d", Wait: DefaultWait, ReconcileAfter: 15 * time.Second,
		SweepInterval: DefaultSweepInterval, RetryInterval: DefaultRetryInterval, TimeoutToFail: DefaultTimeoutToFail,
		RedisPrefix: DefaultRedisPrefix, StartupTimeout: DefaultStartupTimeout, LogLevel: "info",
	}
	if c != want {
		t.Errorf("defaults:\n got %+v\nwant %+v", c, want)
	}
}

func TestConfigInvalid(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"no data dir", Config{}, "data-dir"},
		{"unknown database", Config{DB: "postgres://x"}, "want sqlite://"},
		{"reconcile before wait", Config{DataDir: "d", Wait: 10 * time.Second, ReconcileAfter: 5 * time.Second}, "reconcile-after"},
		{"sub-second retry", Config{DataDir: "d", RetryInterval: time.Millisecond}, "retry-interval"},
		{"table prefix", Config{DataDir: "d", TablePrefix: "x;drop"}, "table-prefix"},
		{"redis prefix", Config{DataDir: "d", RedisPrefix: "a{b}"}, "redis-prefix"},
		{"public url", Config{DataDir: "d", PublicURL: "example:8080"}, "public-url"},
		{"log level", Config{DataDir: "d", LogLevel: "loud"}, "log-level"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.cfg.withDefaults()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error about %s", err, tc.want)
			}
		})
	}
}

func TestRedactDSN(t *testing.T) {
	for in, want := range map[string]string{
		"mysql://root:secret@tcp(db:3306)/shop": "mysql://root:****@tcp(db:3306)/shop",
		"mysql://root@tcp(db:3306)/shop":        "mysql://root@tcp(db:3306)/shop",
		"sqlite:///tmp/x.db":                    "sqlite:///tmp/x.db",
	} {
		if got := redactDSN(in); got != want {
			t.Errorf("redactDSN(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestFlagsOverrideEnvironment: a flag wins over its variable, which wins over the default.
func TestFlagsOverrideEnvironment(t *testing.T) {
	t.Setenv("IDEMKIT_DEMO_WAIT", "7s")
	t.Setenv("IDEMKIT_DEMO_REDIS", "redis:6379")
	t.Setenv("IDEMKIT_DEMO_DTM", "http://dtm:36789/api/dtmsvr")
	var c Config
	fs := c.flagSet("serve", false, nil)
	if err := fs.Parse([]string{"-dtm", "http://other:36789/api/dtmsvr"}); err != nil {
		t.Fatal(err)
	}
	if c.Wait != 7*time.Second || c.Redis != "redis:6379" || c.DTM != "http://other:36789/api/dtmsvr" ||
		c.Listen != DefaultServeListen || c.DataDir != DefaultServeDataDir {
		t.Errorf("got %+v", c)
	}
	var tc Config
	var keep bool
	if err := tc.flagSet("tour", true, &keep).Parse([]string{"-keep"}); err != nil {
		t.Fatal(err)
	}
	if !keep || tc.Listen != DefaultTourListen || tc.DataDir != "" || tc.LogLevel != "warn" {
		t.Errorf("tour defaults: keep %v, %+v", keep, tc)
	}
}

func TestRunCommandLine(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		out  string
	}{
		{[]string{"help"}, 0, "IDEMKIT_DEMO_PUBLIC_URL"},
		{[]string{"frobnicate"}, 2, "unknown command"},
		{[]string{"serve", "-no-such-flag"}, 2, "flag provided but not defined"},
		{[]string{"tour", "extra"}, 2, "unexpected arguments"},
		{[]string{"serve", "-wait", "-1s"}, 1, "wait must be positive"},
	} {
		var out bytes.Buffer
		if code := run(tc.args, &out, &out); code != tc.code || !strings.Contains(out.String(), tc.out) {
			t.Errorf("run(%q) = %d, want %d with %q in:\n%s", tc.args, code, tc.code, tc.out, out.String())
		}
	}
}

// TestEmptyEnvironmentVariableIsUnset: a variable set empty (IDEMKIT_DEMO_LISTEN= in a compose file or
// a script that exports what it may not have) replaced the default with "": the tour listened on
// 8080, the serve default, instead of a free port, and serve failed with "data-dir is needed". An
// empty variable means unset now: the default applies, for the tour and for serve.
func TestEmptyEnvironmentVariableIsUnset(t *testing.T) {
	for _, v := range []string{"LISTEN", "DATA_DIR", "REDIS_PREFIX", "LOG_LEVEL"} {
		t.Setenv(envPrefix+v, "")
	}
	var tc Config
	if err := tc.flagSet("tour", true, nil).Parse(nil); err != nil {
		t.Fatal(err)
	}
	if tc.Listen != DefaultTourListen || tc.LogLevel != "warn" || tc.RedisPrefix != DefaultRedisPrefix {
		t.Errorf("tour with empty variables: %+v, want its defaults (listen %s, log-level warn)", tc, DefaultTourListen)
	}
	var sc Config
	if err := sc.flagSet("serve", false, nil).Parse(nil); err != nil {
		t.Fatal(err)
	}
	if sc.Listen != DefaultServeListen || sc.DataDir != DefaultServeDataDir || sc.LogLevel != "info" {
		t.Errorf("serve with empty variables: %+v, want its defaults", sc)
	}
	if _, err := sc.withDefaults(); err != nil {
		t.Errorf("serve with empty variables: %v", err)
	}
}

// TestMalformedEnvironmentVariableIsRefused: a duration variable that does not parse
// (IDEMKIT_DEMO_WAIT=5 in a compose file, without its unit) was ignored with a line on stderr and
// the default used — the services ran with another configuration than the one given, where the same
// value as a flag is refused. It is refused now, as the flag is (exit 2); a flag given on the command
// line still wins over its variable, malformed or not (found by a defect hunt).
func TestMalformedEnvironmentVariableIsRefused(t *testing.T) {
	t.Setenv("IDEMKIT_DEMO_WAIT", "5")
	var out bytes.Buffer
	// -listen bogus: should the variable be taken, serve fails at once on the listener (exit 1).
	if code := run([]string{"serve", "-listen", "bogus"}, &out, &out); code != 2 || !strings.Contains(out.String(), "IDEMKIT_DEMO_WAIT") {
		t.Errorf("serve with IDEMKIT_DEMO_WAIT=5 exited %d, want 2 naming the variable, with:\n%s", code, out.String())
	}
	out.Reset()
	if code := run([]string{"serve", "-listen", "bogus", "-wait", "2s"}, &out, &out); code != 1 || strings.Contains(out.String(), "IDEMKIT_DEMO_WAIT") {
		t.Errorf("serve with -wait given exited %d, want 1 (the bad listen address) and no word of the variable, with:\n%s", code, out.String())
	}
}

// TestMalformedRedisAddressIsRefused: a -redis value that is neither host:port nor a redis:// URL
// (`-redis localhost`, without the port) was dialled for Config.StartupTimeout, a minute, before
// serve gave up with "Redis localhost did not answer within 1m0s" — a configuration error reported
// as an outage. It is refused at once as invalid configuration (found by a defect hunt).
func TestMalformedRedisAddressIsRefused(t *testing.T) {
	for _, addr := range []string{"localhost", "::::", "127.0.0.1:", "127.0.0.1:port", "127.0.0.1:70000"} {
		if _, err := (Config{DataDir: "d", Redis: addr}).withDefaults(); err == nil || !strings.Contains(err.Error(), "redis") {
			t.Errorf("redis %q: got %v, want an invalid configuration error about redis", addr, err)
		}
	}
	for _, addr := range []string{"127.0.0.1:6379", "redis:6379", "[::1]:6379", "redis://127.0.0.1:6379/0", "rediss://u:p@h:6380"} {
		if _, err := (Config{DataDir: "d", Redis: addr}).withDefaults(); err != nil {
			t.Errorf("redis %q: %v", addr, err)
		}
	}
}

// TestMalformedAddressesAreRefused: -dtm and -public-url were checked for their scheme alone, and -db
// for its prefix: a port that is none (http://127.0.0.1:abc), a URL without a host, a MySQL DSN the
// driver cannot parse or whose port is out of range, and sqlite:// without a path (an unset variable
// in sqlite://$DB_PATH: the data went to a file named "?_pragma=busy_timeout(10000)&..." in the
// working directory) started the services, which
// then failed every order (DTM unreachable, or DTM unable to call the branches back), or failed only
// once the database was opened. Each is an invalid configuration now, named before anything starts.
func TestMalformedAddressesAreRefused(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{DataDir: "d", DTM: "http://127.0.0.1:abc/api/dtmsvr"}, "dtm"},
		{Config{DataDir: "d", DTM: "http://127.0.0.1:99999/api/dtmsvr"}, "dtm"},
		{Config{DataDir: "d", DTM: "http:///api/dtmsvr"}, "dtm"},
		{Config{DataDir: "d", PublicURL: "http://127.0.0.1:abc"}, "public-url"},
		{Config{DataDir: "d", PublicURL: "http://"}, "public-url"},
		{Config{DataDir: "d", DB: "sqlite://"}, "db"},
		{Config{DB: "mysql://garbage"}, "db"},
		{Config{DB: "mysql://root:@tcp(127.0.0.1:99999)/shop"}, "db"},
		{Config{DB: "mysql://root:@tcp(:3306)/shop"}, "db"},
	} {
		if _, err := tc.cfg.withDefaults(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: got %v, want an invalid configuration error about %s", tc.cfg, err, tc.want)
		}
	}
	for _, cfg := range []Config{
		{DataDir: "d", DTM: "http://dtm:36789/api/dtmsvr", PublicURL: "http://example:8080"},
		{DataDir: "d", DTM: "https://[::1]:36789/api/dtmsvr/", PublicURL: "https://10.0.0.5"},
		{DataDir: "d", DB: "sqlite:///tmp/x.db"},
		{DB: "mysql://root:pw@tcp(db:3306)/shop"},
		{DB: "mysql://root:@unix(/run/mysqld/mysqld.sock)/shop"},
	} {
		if _, err := cfg.withDefaults(); err != nil {
			t.Errorf("%+v: %v", cfg, err)
		}
	}
}

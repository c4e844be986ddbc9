package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestBadInput: every kind of bad input exits non-zero with a message saying what is wrong, and
// changes nothing in the table or in Redis.
func TestBadInput(t *testing.T) {
	forEachDialect(t, func(t *testing.T, f *fixture, s *states) {
		before := f.snapshot(t)
		long := strings.Repeat("k", 256)
		cases := []struct {
			name      string
			env       map[string]string // overrides of the fixture's environment
			args      []string
			code      int
			fragments []string
		}{
			{"no command", nil, nil, exitUsage, []string{"Usage:"}},
			{"unknown command", nil, []string{"frobnicate"}, exitUsage, []string{`unknown command "frobnicate"`}},
			{"unknown flag", nil, []string{"list", "--colour"}, exitUsage, []string{"flag provided but not defined: -colour"}},
			{"missing key", nil, []string{"inspect", scopeA}, exitUsage, []string{"want 2 argument(s) SCOPE KEY, got 1"}},
			{"argument to a command that takes none", nil, []string{"list", scopeA, s.ok}, exitUsage, []string{"want no arguments, got 2"}},
			{"extra argument", nil, []string{"release", scopeA, s.stuck, "more"}, exitUsage, []string{"got 3"}},
			{"control character in key", nil, []string{"inspect", scopeA, "k\x01"}, exitUsage, []string{"invalid idempotency key", "control character"}},
			{"invalid UTF-8 key", nil, []string{"release", "--yes", scopeA, "k\xff"}, exitUsage, []string{"invalid UTF-8"}},
			{"empty key", nil, []string{"purge", "--yes", scopeA, ""}, exitUsage, []string{"invalid idempotency key: empty"}},
			{"key over MaxKeyLen", nil, []string{"inspect", scopeA, long}, exitUsage, []string{"256 bytes, longer than 255"}},
			{"empty scope", nil, []string{"inspect", "", s.ok}, exitUsage, []string{"scope: idemkit: invalid idempotency key"}},
			{"malformed scope filter", nil, []string{"list", "--scope", "a\nb"}, exitUsage, []string{"control character"}},
			{"unknown scope", nil, []string{"release", "--yes", "DELETE /x", s.stuck}, exitNotFound, []string{"unknown scope", `"DELETE /x"`}},
			{"unknown scope filter", nil, []string{"purge", "--yes", "--scope", "DELETE /x"}, exitNotFound, []string{"unknown scope"}},
			{"scope of another namespace", map[string]string{"IDEMCTL_NAMESPACE": "nobody"}, []string{"inspect", scopeA, s.ok}, exitNotFound, []string{"unknown scope", `in namespace "nobody"`}},
			{"no database", map[string]string{"IDEMCTL_DB": ""}, []string{"list"}, exitUsage, []string{"no database"}},
			{"DSN without scheme", map[string]string{"IDEMCTL_DB": "root:pw@tcp(127.0.0.1:3306)/x"}, []string{"list"}, exitUsage, []string{"want mysql://"}},
			{"unknown DSN scheme", map[string]string{"IDEMCTL_DB": "oracle://scott:tiger@db/x"}, []string{"list"}, exitUsage, []string{`unknown scheme "oracle"`, "scott:****@"}},
			{"malformed MySQL DSN", nil, []string{"list", "--db", "mysql://root@127.0.0.1/x"}, exitUsage, []string{"--db mysql://root@127.0.0.1/x: default addr"}},
			// An unset variable in "tcp(${DB_HOST}:3306)": go-sql-driver dials ":3306" on localhost.
			{"MySQL DSN with a port but no host", nil, []string{"purge", "--yes", "--db", "mysql://root:pw@tcp(:3306)/x", scopeA, s.failed}, exitUsage, []string{"--db mysql://root:****@tcp(:3306)/x", "no host"}},
			// A port out of range or not a number was dialled, and the dial's error exited 1, as an
			// unreachable database does (the same mistake in a PostgreSQL URL exits 2).
			{"MySQL DSN with a port out of range", nil, []string{"list", "--db", "mysql://root:pw@tcp(127.0.0.1:99999)/x"}, exitUsage, []string{"--db mysql://root:****@tcp(127.0.0.1:99999)/x", "port"}},
			{"MySQL DSN with a port that is no number", nil, []string{"list", "--db", "mysql://root:pw@tcp(127.0.0.1:abc)/x"}, exitUsage, []string{"--db mysql://root:****@tcp(127.0.0.1:abc)/x", "port"}},
			{"malformed PostgreSQL URL", nil, []string{"list", "--db", "postgres://u:p@h:notaport/db"}, exitUsage, []string{"--db postgres://u:****@h:notaport/db"}},
			{"unreachable database", nil, []string{"list", "--db", "mysql://root:pw@tcp(127.0.0.1:1)/x", "--timeout", "5s"}, exitError, []string{"mysql://root:****@tcp(127.0.0.1:1)/x: admin: connecting to the database", "connection refused"}},
			{"missing SQLite file", nil, []string{"list", "--db", "sqlite://" + filepath.Join(t.TempDir(), "none.db")}, exitError, []string{"no such file", "opens an existing database only"}},
			{"missing table", map[string]string{"IDEMCTL_TABLE": "no_such_table"}, []string{"list"}, exitError, []string{"no record table", "no_such_table", "is --table"}},
			{"invalid table name", nil, []string{"list", "--table", "x; DROP TABLE y"}, exitUsage, []string{"invalid table name"}},
			{"invalid namespace", nil, []string{"list", "--namespace", "a/b"}, exitUsage, []string{"Namespace", "contains '/'"}},
			{"unreachable Redis", nil, []string{"inspect", "--redis", "127.0.0.1:1", scopeA, s.ok}, exitError, []string{"connecting to Redis"}},
			{"Redis URL without a host", nil, []string{"list", "--redis", "redis://"}, exitUsage, []string{"--redis redis://", "no host"}},
			{"Redis URL with a port but no host", map[string]string{"IDEMCTL_REDIS": "rediss://:6380/0"}, []string{"inspect", scopeA, s.ok}, exitUsage, []string{"--redis rediss://:6380/0", "no host"}},
			// An unset variable in "$REDIS_HOST:6379" leaves ":6379", which go-redis dials on localhost:
			// another Redis than the application's, read and cleared as if it were.
			{"Redis address with a port but no host", map[string]string{"IDEMCTL_REDIS": ":6379"}, []string{"inspect", scopeA, s.ok}, exitUsage, []string{"--redis :6379", "no host"}},
			{"Redis Cluster seed without a host", nil, []string{"release", "--yes", "--redis", "10.0.0.1:6379,:6379", scopeA, s.stuck}, exitUsage, []string{"--redis 10.0.0.1:6379,:6379", "no host"}},
			// As for --db: exit 1, "connecting to Redis", where a redis:// URL with the same port exits 2.
			{"Redis address with a port out of range", nil, []string{"inspect", "--redis", "127.0.0.1:99999", scopeA, s.ok}, exitUsage, []string{"--redis 127.0.0.1:99999", "port"}},
			{"Redis Cluster seed with a port that is no number", nil, []string{"inspect", "--redis", "10.0.0.1:6379,10.0.0.2:abc", scopeA, s.ok}, exitUsage, []string{"--redis 10.0.0.1:6379,10.0.0.2:abc", "port"}},
			{"Redis URL with a port out of range", nil, []string{"inspect", "--redis", "redis://127.0.0.1:99999/0", scopeA, s.ok}, exitUsage, []string{"--redis redis://127.0.0.1:99999/0", "port"}},
			{"Redis address without a port", nil, []string{"purge", "--yes", "--redis", "redis-host", scopeA, s.failed}, exitUsage, []string{"--redis redis-host", "want host:port"}},
			{"Redis prefix with a brace", nil, []string{"list", "--redis-prefix", "a{b"}, exitUsage, []string{"must not contain"}},
			{"unknown status", nil, []string{"list", "--status", "DONE"}, exitUsage, []string{`--status "DONE"`}},
			{"stuck with another status", nil, []string{"list", "--stuck", "--status", "FAILED"}, exitUsage, []string{"conflicts with --status FAILED"}},
			{"negative age", nil, []string{"list", "--older-than", "-5s"}, exitUsage, []string{"must not be negative"}},
			{"malformed age", nil, []string{"list", "--older-than", "yesterday"}, exitUsage, []string{"invalid value"}},
			{"zero limit", nil, []string{"list", "--limit", "0"}, exitUsage, []string{"--limit must be positive"}},
			{"zero timeout", nil, []string{"stats", "--timeout", "0s"}, exitUsage, []string{"--timeout must be positive"}},
			{"bad environment number", map[string]string{"IDEMCTL_MAX_KEY_LEN": "many"}, []string{"list"}, exitUsage, []string{`IDEMCTL_MAX_KEY_LEN="many"`}},
			{"bad environment duration", map[string]string{"IDEMCTL_TIMEOUT": "soon"}, []string{"list"}, exitUsage, []string{`IDEMCTL_TIMEOUT="soon"`}},
			{"invalid UTF-8 reason", nil, []string{"release", "--yes", "--force", "--reason", "bad \xff", scopeA, s.stuck}, exitUsage, []string{"--reason", "not valid UTF-8"}},
			{"reason with a line break", nil, []string{"release", "--yes", "--force", "--reason", "a\nb", scopeA, s.stuck}, exitUsage, []string{"--reason", "line break"}},
			{"reason over 512 bytes", nil, []string{"release", "--yes", "--force", "--reason", strings.Repeat("r", 600), scopeA, s.stuck}, exitUsage, []string{"--reason", "at most 512"}},
			{"purge: zero lease", nil, []string{"purge", "--yes", "--lease", "0s", scopeA, s.failed}, exitUsage, []string{"--lease must be positive"}},
			{"purge: key and filters", nil, []string{"purge", "--yes", "--status", "FAILED", scopeA, s.failed}, exitUsage, []string{"conflict"}},
			{"purge: nothing selected", nil, []string{"purge", "--yes"}, exitUsage, []string{"at least one filter"}},
			{"purge: one argument", nil, []string{"purge", "--yes", scopeA}, exitUsage, []string{"want SCOPE KEY or filters"}},
			{"sweep in a namespace", nil, []string{"sweep", "--yes"}, exitUsage, []string{"without --namespace"}},
			{"invalid UTF-8 gid filter", nil, []string{"list", "--gid", "g\xff"}, exitUsage, []string{"--gid", "not valid UTF-8"}},
			{"gid filter over 128 bytes", nil, []string{"purge", "--yes", "--gid", strings.Repeat("g", 129)}, exitUsage, []string{"--gid", "longer than 128"}},
			{"invalid UTF-8 gid", map[string]string{"IDEMCTL_DTM": "http://127.0.0.1:1/api/dtmsvr"}, []string{"dtm", "g\xff"}, exitUsage, []string{"GID", "not valid UTF-8"}},
			// An empty GID was sent to DTM, which answered HTTP 500 "no gid specified": exit 1, as if
			// DTM had failed.
			{"empty gid", map[string]string{"IDEMCTL_DTM": "http://127.0.0.1:1/api/dtmsvr"}, []string{"dtm", ""}, exitUsage, []string{"GID", "empty"}},
			{"dtm without a server", nil, []string{"dtm", s.gid}, exitUsage, []string{"--dtm or IDEMCTL_DTM"}},
			{"dtm with a bad URL", map[string]string{"IDEMCTL_DTM": "dtm:36789"}, []string{"dtm", s.gid}, exitUsage, []string{"want http://"}},
			{"dtm unreachable", map[string]string{"IDEMCTL_DTM": "http://127.0.0.1:1/api/dtmsvr"}, []string{"dtm", s.gid}, exitError, []string{"txstatus"}},
			{"metrics unreachable", nil, []string{"stats", "--metrics", "http://127.0.0.1:1/metrics"}, exitError, []string{"scraping"}},
			{"metrics URL without a scheme", nil, []string{"stats", "--metrics", "http://127.0.0.1:1/metrics,app:8080/metrics"}, exitUsage, []string{`--metrics "app:8080/metrics"`, "want http://"}},
			{"metrics URL without a host", nil, []string{"stats", "--metrics", "http:///metrics"}, exitUsage, []string{`--metrics "http:///metrics"`, "want http://"}},
			{"dtm URL without a host", map[string]string{"IDEMCTL_DTM": "http://"}, []string{"dtm", s.gid}, exitUsage, []string{`--dtm "http://"`, "want http://"}},
			{"dtm URL with a port out of range", map[string]string{"IDEMCTL_DTM": "http://127.0.0.1:99999/api/dtmsvr"}, []string{"dtm", s.gid}, exitUsage, []string{`--dtm "http://127.0.0.1:99999/api/dtmsvr"`, "want http://"}},
			{"metrics URL with a port out of range", nil, []string{"stats", "--metrics", "http://127.0.0.1:0/metrics"}, exitUsage, []string{`--metrics "http://127.0.0.1:0/metrics"`, "want http://"}},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				saved := map[string]string{}
				for k, v := range c.env {
					saved[k] = f.env[k]
					f.env[k] = v
				}
				defer func() {
					for k, v := range saved {
						f.env[k] = v
					}
				}()
				r := f.want(t, c.code, nil, c.args, c.fragments...)
				if c.code != exitOK && r.stderr == "" {
					t.Fatalf("no message on stderr: %s", r)
				}
				lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
				for i, l := range lines {
					for j, other := range lines {
						if l != "" && i != j && strings.Contains(other, l) {
							t.Fatalf("stderr says %q twice: %s", l, r)
						}
					}
				}
				if after := f.snapshot(t); after != before {
					t.Fatalf("bad input changed something:\nbefore:\n%s\nafter:\n%s", before, after)
				}
			})
		}
	})
}

// TestBinary runs the built command: exit codes reach the shell, --help works on every command, and
// the environment configures it.
func TestBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the command")
	}
	bin := filepath.Join(t.TempDir(), "idemctl")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	f := setup(t, "sqlite")
	s := f.populate(t)
	runBin := func(env map[string]string, argv ...string) (int, string) {
		t.Helper()
		cmd := exec.Command(bin, argv...)
		cmd.Env = os.Environ()
		for k, v := range env {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode(), out.String()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0, out.String()
	}
	if code, out := runBin(nil, "--help"); code != 0 || !strings.Contains(out, "Exit codes:") {
		t.Fatalf("--help: %d\n%s", code, out)
	}
	for _, c := range commands {
		if code, out := runBin(nil, c.name, "--help"); code != 0 || !strings.Contains(out, "Usage: idemctl "+c.name) {
			t.Fatalf("%s --help: %d\n%s", c.name, code, out)
		}
	}
	if code, out := runBin(nil); code != exitUsage {
		t.Fatalf("no arguments: %d\n%s", code, out)
	}
	if code, out := runBin(f.env, "inspect", scopeA, "k-none"); code != exitNotFound {
		t.Fatalf("inspect of a missing key: %d\n%s", code, out)
	}
	if code, out := runBin(f.env, "inspect", scopeA, s.ok); code != exitOK || !strings.Contains(out, "SUCCEEDED") {
		t.Fatalf("inspect: %d\n%s", code, out)
	}
	if code, out := runBin(f.env, "release", scopeA, s.live); code != exitRefused {
		t.Fatalf("release of a live claim: %d\n%s", code, out)
	}
}

package docs

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/glebarez/sqlite"
	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/httpx"
	"github.com/idemkit/idemkit/idemotel"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/memory"
	"github.com/idemkit/idemkit/record"
	"github.com/idemkit/idemkit/sweep"
)

// TestConfigurationDefaults checks the defaults the README's "Configuration" section and the httpx
// README's options table state against the code: against what a zero-valued option does where a
// Guard, Store or Locker shows it (the lease, lock TTL, TTL and cache TTL a claim gets, the key
// limit, the table, the Redis key), and against the exported default constants elsewhere.
func TestConfigurationDefaults(t *testing.T) {
	root := setup(t).root
	readme := section(t, filepath.Join(root, "README.md"), "## Configuration")
	table := defaultsTable(readme)
	if len(table) < 10 {
		t.Fatalf("the Configuration table has %d rows with a default: its parsing is broken", len(table))
	}

	// What a Guard with zero-valued durations and limits does: a Locker that records the TTLs it is
	// given, a fixed clock so that the cache TTL (capped by the record's remaining TTL) is exact.
	ctx := context.Background()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	lk := &ttlLocker{Locker: memory.NewLocker(nil)}
	g, err := idemkit.New(memory.NewStore(), &idemkit.Options{Locker: lk, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	cl, _, err := g.Begin(ctx, idemkit.Call{Scope: "defaults", Key: "k"})
	if err != nil {
		t.Fatal(err)
	}
	rec := cl.Record()
	if _, err := cl.Finish(ctx, []byte("ok"), nil); err != nil {
		t.Fatal(err)
	}
	sq, err := gorm.Open(sqlite.Open("file:defaults?mode=memory&cache=shared"), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		t.Fatal(err)
	}
	store, err := record.New(sq, nil)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled: Key only formats
	t.Cleanup(func() { _ = rdb.Close() })
	redisKey := lock.New(rdb, nil).Key(idemkit.LockKey("s", "k"))

	for _, c := range []struct {
		field    string
		code     string // the default, written as the table writes it
		behaves  string // what the zero value does, written the same way; "" when not observable
		constant string // the exported constant, for the fields whose default the code names
	}{
		{"Lease", "30s", dur(rec.LeaseUntil.Sub(now)), dur(idemkit.DefaultLease)},
		{"LockTTL", "`Lease`", lease(lk.acquireTTL, rec.LeaseUntil.Sub(now)), ""},
		{"TTL", "24h", dur(rec.ExpiresAt.Sub(now)), dur(idemkit.DefaultTTL)},
		{"CacheTTL", "`TTL`", lease(lk.cacheTTL, rec.ExpiresAt.Sub(now), "`TTL`"), ""},
		{"MaxHold", "10m", "", dur(idemkit.DefaultMaxHold)},
		{"FinishTimeout", "5s", "", dur(idemkit.DefaultFinishTimeout)},
		{"MaxKeyLen", "255", fmt.Sprint(g.MaxKeyLen()), fmt.Sprint(idemkit.DefaultMaxKeyLen)},
		{"FailOpen", "false", "", ""},
		{"Watchdog", "false", "", ""},
		{"LogKeys", "false", "", ""},
		{"Namespace", `""`, "", ""},
	} {
		doc, ok := table[c.field]
		if !ok {
			t.Errorf("the Configuration table has no row for idemkit.Options.%s", c.field)
			continue
		}
		if doc != c.code {
			t.Errorf("idemkit.Options.%s: the README says the default is %s, the test expects %s", c.field, doc, c.code)
		}
		if c.behaves != "" && c.behaves != doc {
			t.Errorf("idemkit.Options.%s: the README says the default is %s, the zero value gives %s", c.field, doc, c.behaves)
		}
		if c.constant != "" && c.constant != doc {
			t.Errorf("idemkit.Options.%s: the README says the default is %s, the constant is %s", c.field, doc, c.constant)
		}
	}

	for _, c := range []struct {
		what, pattern, want string
	}{
		{"record.Options.Table", "`Table` \\(default `(.+?)`", store.Table()},
		{"record.Options.Table (constant)", "`Table` \\(default `(.+?)`", record.DefaultTable},
		{"record.Options.BatchTimeout", "`BatchTimeout` \\(default (\\S+?),", dur(record.DefaultBatchTimeout)},
		{"record.Options.NoBatch", "`NoBatch` \\(default (\\w+)\\)", "false"},
		{"record.Options.NoMultiStatements", "`NoMultiStatements` \\(default (\\w+)\\)", "false"},
		{"lock.Options.Prefix", "`Prefix` \\(default `(.+?)`", redisKey[:strings.IndexByte(redisKey, '{')]},
		{"lock.Options.Prefix (constant)", "`Prefix` \\(default `(.+?)`", lock.DefaultPrefix},
		{"lock.Options.Scripts", "`Scripts` \\(default (\\w+)\\)", "false"},
		{"lock.Options.MaxInFlight", "`MaxInFlight` \\(default (\\d+)\\)", fmt.Sprint(lock.DefaultMaxInFlight)},
	} {
		m := regexp.MustCompile(c.pattern).FindStringSubmatch(readme)
		if m == nil {
			t.Errorf("%s: the Configuration section states no default (%s)", c.what, c.pattern)
			continue
		}
		if m[1] != c.want {
			t.Errorf("%s: the README says the default is %s, the code gives %s", c.what, m[1], c.want)
		}
	}
	if !strings.HasPrefix(redisKey, lock.DefaultPrefix) {
		t.Errorf("a Locker with nil options writes %q, not under lock.DefaultPrefix %q", redisKey, lock.DefaultPrefix)
	}

	operating := section(t, filepath.Join(root, "README.md"), "## Operating idemkit")
	for _, c := range []struct {
		what, pattern, want string
	}{
		{"sweep.Options.BatchSize", `one statement of at most (\d+) rows`, fmt.Sprint(sweep.DefaultBatchSize)},
		{"idemotel.Options.MaxScopes", `\x60idemotel.Options.MaxScopes\x60 distinct scopes, default (\d+)`, fmt.Sprint(idemotel.DefaultMaxScopes)},
		{"idemotel.Options.ClaimsTimeout", `\x60idemotel.Options.ClaimsTimeout\x60 \((\d+) s`, fmt.Sprint(idemotel.DefaultClaimsTimeout.Seconds())},
		{"idemctl --table", `\x60--table\x60 \| \x60IDEMCTL_TABLE\x60 \| record table \(default \x60(.+?)\x60`, record.DefaultTable},
		{"idemctl --max-key-len", `\x60--max-key-len\x60 \|.*\(default (\d+)\)`, fmt.Sprint(idemkit.DefaultMaxKeyLen)},
		{"idemctl --redis-prefix", `\x60lock.Options.Prefix\x60 \(default \x60(.+?)\x60`, lock.DefaultPrefix},
	} {
		m := regexp.MustCompile(c.pattern).FindStringSubmatch(operating)
		switch {
		case m == nil:
			t.Errorf("%s: the Operating section states no default (%s)", c.what, c.pattern)
		case m[1] != c.want:
			t.Errorf("%s: the README says the default is %s, the code gives %s", c.what, m[1], c.want)
		}
	}

	hx := defaultsTable(section(t, filepath.Join(root, "httpx", "README.md"), ""))
	for _, c := range []struct{ field, want string }{
		{"Key", fmt.Sprintf("`Header(%q)`", httpx.DefaultHeader)},
		{"Methods", "`" + strings.Join(httpx.DefaultMethods(), "`, `") + "`"},
		{"MaxKeyLen", "`" + fmt.Sprint(httpx.DefaultMaxKeyLen) + "` (or the Guard's `MaxKeyLen`, if smaller)"},
		{"MaxBodyBytes", mib(httpx.DefaultMaxBodyBytes)},
		{"MaxResponseBytes", mib(int64(httpx.DefaultMaxResponseBytes))},
		{"InFlightRetryAfter", "`" + dur(httpx.DefaultInFlightRetryAfter) + "`"},
		{"RequestID", "the `" + httpx.DefaultRequestIDHeader + "` header"},
	} {
		doc, ok := hx[c.field]
		if !ok {
			t.Errorf("httpx/README.md's options table has no row for %s", c.field)
			continue
		}
		if doc != c.want {
			t.Errorf("httpx.Options.%s: httpx/README.md says the default is %s, the code gives %s", c.field, doc, c.want)
		}
	}
}

// ttlLocker records the TTLs a Guard passes to its Locker.
type ttlLocker struct {
	idemkit.Locker
	acquireTTL, cacheTTL time.Duration
}

func (l *ttlLocker) Acquire(ctx context.Context, key, token string, ttl time.Duration) ([]byte, error) {
	l.acquireTTL = ttl
	return l.Locker.Acquire(ctx, key, token, ttl)
}

func (l *ttlLocker) Release(ctx context.Context, key, token string, result []byte, cacheTTL time.Duration) error {
	l.cacheTTL = cacheTTL
	return l.Locker.Release(ctx, key, token, result, cacheTTL)
}

// lease names a TTL the way the table does when it defaults to another field: `Lease` (or the name
// given) when it equals that field's value, the duration otherwise.
func lease(got, of time.Duration, name ...string) string {
	if got == of {
		if len(name) > 0 {
			return name[0]
		}
		return "`Lease`"
	}
	return dur(got)
}

// dur writes a duration as the README does: 30s, 10m, 24h, 1m30s.
func dur(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

func mib(n int64) string {
	if n%(1<<20) != 0 {
		return fmt.Sprintf("%d bytes", n)
	}
	return fmt.Sprintf("%d MiB", n>>20)
}

// section returns the Markdown file's text from the heading to the next heading of the same level,
// or the whole file for "".
func section(t *testing.T, file, heading string) string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	if heading == "" {
		return s
	}
	i := strings.Index(s, "\n"+heading+"\n")
	if i < 0 {
		t.Fatalf("%s has no %q section", file, heading)
	}
	s = s[i+1+len(heading):]
	level := heading[:strings.Index(heading, " ")+1]
	if j := strings.Index(s, "\n"+level); j >= 0 {
		s = s[:j]
	}
	return s
}

// defaultsTable reads the first "| field | default | meaning |" table of a Markdown text: field
// name (without backquotes) to its default cell.
func defaultsTable(md string) map[string]string {
	rows := map[string]string{}
	in := false
	for _, l := range strings.Split(md, "\n") {
		switch {
		case strings.HasPrefix(l, "| field | default |"):
			in = true
		case in && strings.HasPrefix(l, "|---"):
		case in && strings.HasPrefix(l, "| `"):
			cells := strings.Split(l, " | ")
			if len(cells) >= 2 {
				rows[strings.Trim(strings.TrimPrefix(cells[0], "| "), "`")] = strings.TrimSpace(cells[1])
			}
		case in:
			return rows
		}
	}
	return rows
}

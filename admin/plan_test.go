package admin

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/record"
)

// planRows is the size of the table the plan tests read: large enough that a table scan costs more
// than an index range to every planner, small enough to fill in a second.
const planRows = 20000

// planTable creates a record table on db filled with planRows records — 1% PROCESSING (half of them
// with their lease run out), 10% FAILED, 10% REJECTED, the rest SUCCEEDED; two scopes of namespace
// "ns" and one of another; runs of 7 records sharing an expiry — analyses it and returns an Admin in
// namespace ns on it (now = 10_000 ms) and the table's name.
func planTable(t *testing.T, db *gorm.DB) (*Admin, string) {
	t.Helper()
	ctx := context.Background()
	name := testsvc.Name("admin_plan_")
	st, err := record.New(db, &record.Options{Table: name})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.CreateTable(ctx); err != nil {
		t.Fatal(err)
	}
	testsvc.DropTable(t, db, name)
	q := newSQLTexts(st.Dialect(), name)
	const batch = 1000
	for first := 0; first < planRows; first += batch {
		var b strings.Builder
		b.WriteString("INSERT INTO " + q.table + " (scope, idem_key, status, fence, owner, error, lease_until, expires_at, created_at, updated_at) VALUES ")
		for n := first; n < first+batch; n++ {
			status, lease := "SUCCEEDED", int64(0)
			switch {
			case n%100 == 0:
				status, lease = "PROCESSING", int64(5_000+10_000*(n/100%2)) // half run out at now = 10_000
			case n%10 == 1:
				status = "FAILED"
			case n%10 == 2:
				status = "REJECTED"
			}
			scope := []string{"ns/a", "ns/b", "other/c"}[n%3]
			if n > first {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, "('%s', 'k%06d', '%s', 1, 'o', '', %d, %d, %d, %d)", scope, n, status, lease, 1_000+n/7, n, n)
		}
		if err := db.WithContext(ctx).Exec(b.String()).Error; err != nil {
			t.Fatal(err)
		}
	}
	analyze := map[string]string{"mysql": "ANALYZE TABLE " + q.table, "postgres": "ANALYZE " + q.table, "sqlite": "ANALYZE"}[st.Dialect()]
	if err := db.WithContext(ctx).Exec(analyze).Error; err != nil {
		t.Fatal(err)
	}
	adm, err := New(db, &Options{Table: name, Namespace: "ns", Now: func() time.Time { return time.UnixMilli(10_000) }})
	if err != nil {
		t.Fatal(err)
	}
	return adm, name
}

// explain returns the plan of query as text lines, one per plan row (MySQL: the EXPLAIN columns
// table, type, key and Extra; PostgreSQL: the plan's lines; SQLite: EXPLAIN QUERY PLAN's details).
func explain(t *testing.T, db *gorm.DB, dialect, query string, args []any) []string {
	t.Helper()
	prefix := map[string]string{"mysql": "EXPLAIN ", "postgres": "EXPLAIN ", "sqlite": "EXPLAIN QUERY PLAN "}[dialect]
	rows, err := db.Raw(prefix+query, args...).Rows()
	if err != nil {
		t.Fatalf("%s%s: %v", prefix, query, err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		dest := make([]any, len(cols))
		for i := range vals {
			dest[i] = &vals[i]
		}
		if err := rows.Scan(dest...); err != nil {
			t.Fatal(err)
		}
		col := func(name string) string {
			i := slices.IndexFunc(cols, func(c string) bool { return strings.EqualFold(c, name) })
			if i < 0 {
				return ""
			}
			return vals[i].String
		}
		switch dialect {
		case "mysql":
			out = append(out, fmt.Sprintf("table=%s type=%s key=%s extra=%s", col("table"), col("type"), col("key"), col("Extra")))
		case "postgres":
			out = append(out, vals[0].String)
		default:
			out = append(out, col("detail"))
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// usesStatusIndex reports whether plan reads table through its (status, expires_at) index and never
// scans it; with ordered, also that no sort of the rows read is needed (an incremental sort of
// PostgreSQL within equal expiries, which the index leaves unordered, is fine).
func usesStatusIndex(dialect, table string, plan []string, ordered bool) bool {
	text := strings.Join(plan, "\n")
	switch dialect {
	case "mysql":
		// One row per table read: ours must use the index, never type ALL (a full scan).
		for _, row := range plan {
			if !strings.Contains(row, "table="+table+" ") {
				continue
			}
			if strings.Contains(row, "type=ALL") || !strings.Contains(row, "key=idx_status_expires ") ||
				ordered && strings.Contains(row, "filesort") {
				return false
			}
		}
		return strings.Contains(text, "key=idx_status_expires ")
	case "postgres":
		if strings.Contains(text, "Seq Scan") || !strings.Contains(text, table+"_status_expires_idx") {
			return false
		}
		if ordered {
			for _, line := range plan {
				l := strings.TrimLeft(line, " ->")
				if strings.HasPrefix(l, "Sort  (") { // a Sort node; "Sort Key:" lines and Incremental Sort pass
					return false
				}
			}
		}
		return true
	default:
		for _, d := range plan {
			if strings.HasPrefix(d, "SCAN "+table) && !strings.Contains(d, "INDEX "+table+"_status_expires_idx") {
				return false
			}
			if ordered && strings.Contains(d, "USE TEMP B-TREE FOR ORDER BY") {
				return false
			}
		}
		return strings.Contains(text, "INDEX "+table+"_status_expires_idx")
	}
}

// TestPlansUseStatusIndex: the claims gauge's query (run on every Prometheus scrape), listings of
// one status or of stuck claims (first and later pages) and the sweeper's expired listing read the
// table through its (status, expires_at) index — never a table scan — on MariaDB, PostgreSQL and
// SQLite, and the listings of a common status need no sort of what they read (they stop after a
// page's rows).
func TestPlansUseStatusIndex(t *testing.T) {
	for _, dialect := range []string{"mysql", "postgres", "sqlite"} {
		t.Run(dialect, func(t *testing.T) {
			open := map[string]func(testing.TB, *gorm.Config) *gorm.DB{"mysql": testsvc.MySQL, "postgres": testsvc.Postgres, "sqlite": testsvc.SQLite}[dialect]
			db := open(t, nil)
			adm, table := planTable(t, db)
			ctx := context.Background()
			now := adm.opts.Now()
			f := func(f Filter) where {
				w, err := adm.where(ctx, &f, now)
				if err != nil {
					t.Fatal(err)
				}
				return w
			}
			var noNS where
			after := &Entry{Record: idemkit.Record{Scope: "ns/a", Key: "k001000", ExpiresAt: time.UnixMilli(1_142)}}
			cases := []struct {
				name    string
				ordered bool
				query   string
				args    []any
			}{}
			add := func(name string, ordered bool, query string, args []any) {
				cases = append(cases, struct {
					name    string
					ordered bool
					query   string
					args    []any
				}{name, ordered, query, args})
			}
			q, a := adm.q.claims(f(Filter{}), millis(now))
			add("claims gauge, namespace", false, q, a)
			q, a = adm.q.claims(noNS, millis(now))
			add("claims gauge", false, q, a)
			for _, status := range []idemkit.Status{idemkit.StatusProcessing, idemkit.StatusRejected, idemkit.StatusSucceeded} {
				// The claims are few: sorting them is cheap, and a planner may.
				ordered := status != idemkit.StatusProcessing
				q, a = adm.q.page(f(Filter{Status: status}), nil, pageSize)
				add("list "+string(status)+", first page", ordered, q, a)
				q, a = adm.q.page(f(Filter{Status: status}), after, pageSize)
				add("list "+string(status)+", next page", ordered, q, a)
			}
			q, a = adm.q.page(f(Filter{Stuck: true}), nil, pageSize)
			add("list stuck", false, q, a)
			var w where
			w.add(condExpired, millis(now), millis(now))
			q, a = adm.q.sweepList(w, "status, expires_at", 100)
			add("sweep plan, expired", true, q, a)
			for _, c := range cases {
				plan := explain(t, db, dialect, c.query, c.args)
				if !usesStatusIndex(dialect, table, plan, c.ordered) {
					t.Errorf("%s: the plan does not read through the (status, expires_at) index%s:\n%s\n%s",
						c.name, map[bool]string{true: " in its order", false: ""}[c.ordered], c.query, strings.Join(plan, "\n"))
				}
			}
			// Claims reads what is there: 200 claims in all, 100 of them stuck, 2/3 in namespace ns.
			claims, err := adm.Claims(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var processing, stuck int64
			for _, c := range claims {
				processing += c.Processing
				stuck += c.Stuck
			}
			if len(claims) != 2 || processing != 134 || stuck != 67 {
				t.Fatalf("Claims: %+v; want 2 scopes, 134 claims, 67 stuck", claims)
			}
		})
	}
}

// TestListOneStatusPages: a listing of one status pages through the status index's order (expiry,
// then scope and key) without losing or repeating a record, across pages whose boundaries fall
// inside runs of records sharing an expiry, with and without a scope.
func TestListOneStatusPages(t *testing.T) {
	for _, dialect := range []string{"mysql", "postgres", "sqlite"} {
		t.Run(dialect, func(t *testing.T) {
			open := map[string]func(testing.TB, *gorm.Config) *gorm.DB{"mysql": testsvc.MySQL, "postgres": testsvc.Postgres, "sqlite": testsvc.SQLite}[dialect]
			adm, _ := planTable(t, open(t, nil))
			ctx := context.Background()
			check := func(f Filter, want func(n int) bool) {
				t.Helper()
				pages := 0
				f.Limit, f.Progress = planRows, func(int) { pages++ }
				got, err := adm.List(ctx, f)
				if err != nil {
					t.Fatal(err)
				}
				var keys, wantKeys []string
				for i, e := range got {
					keys = append(keys, e.Scope+" "+e.Key)
					if i > 0 {
						p := got[i-1]
						if e.ExpiresAt.Before(p.ExpiresAt) || e.ExpiresAt.Equal(p.ExpiresAt) && (e.Scope < p.Scope || e.Scope == p.Scope && e.Key <= p.Key) {
							t.Fatalf("%+v: %s %s after %s %s: out of (expiry, scope, key) order", f, e.Scope, e.Key, p.Scope, p.Key)
						}
					}
				}
				for n := range planRows {
					if scope := []string{"ns/a", "ns/b", "other/c"}[n%3]; strings.HasPrefix(scope, "ns/") && want(n) &&
						(f.Scope == "" || "ns/"+f.Scope == scope) {
						wantKeys = append(wantKeys, scope+" "+fmt.Sprintf("k%06d", n))
					}
				}
				slices.Sort(keys)
				slices.Sort(wantKeys)
				if !slices.Equal(keys, wantKeys) {
					t.Fatalf("%+v: %d records, want %d", f, len(keys), len(wantKeys))
				}
				if pages < 2 {
					t.Fatalf("%+v: %d pages; the test needs several", f, pages)
				}
			}
			check(Filter{Status: idemkit.StatusFailed}, func(n int) bool { return n%100 != 0 && n%10 == 1 })
			check(Filter{Status: idemkit.StatusSucceeded, Scope: "a"}, func(n int) bool { return n%100 != 0 && n%10 != 1 && n%10 != 2 })
		})
	}
}

// TestNamespaceIsExact: a namespace selects the scopes starting with "<namespace>/" byte for byte —
// LIKE's wildcards and escape character in a namespace are literal, and case counts.
func TestNamespaceIsExact(t *testing.T) {
	for _, dialect := range []string{"mysql", "postgres", "sqlite"} {
		t.Run(dialect, func(t *testing.T) {
			open := map[string]func(testing.TB, *gorm.Config) *gorm.DB{"mysql": testsvc.MySQL, "postgres": testsvc.Postgres, "sqlite": testsvc.SQLite}[dialect]
			db := open(t, nil)
			ctx := context.Background()
			name := testsvc.Name("admin_ns_")
			st, err := record.New(db, &record.Options{Table: name})
			if err != nil {
				t.Fatal(err)
			}
			if err := st.CreateTable(ctx); err != nil {
				t.Fatal(err)
			}
			testsvc.DropTable(t, db, name)
			scopes := []string{"a_b/x", "axb/x", "A_B/x", "a_bc/x", "a%/x", "ab/x", "a!b/x", "a!!b/x", "ab%/x"}
			for _, sc := range scopes {
				if err := st.Insert(ctx, &idemkit.Record{Scope: sc, Key: "k", Status: idemkit.StatusSucceeded, Fence: 1}); err != nil {
					t.Fatal(err)
				}
			}
			for ns, want := range map[string]string{"a_b": "a_b/x", "a%": "a%/x", "a!b": "a!b/x", "ab": "ab/x", "A_B": "A_B/x"} {
				adm, err := New(db, &Options{Table: name, Namespace: ns})
				if err != nil {
					t.Fatal(err)
				}
				got, err := adm.List(ctx, Filter{})
				if err != nil {
					t.Fatal(err)
				}
				if len(got) != 1 || got[0].Scope != want {
					var s []string
					for _, e := range got {
						s = append(s, e.Scope)
					}
					t.Errorf("namespace %q lists %q, want only %q", ns, s, want)
				}
			}
		})
	}
}

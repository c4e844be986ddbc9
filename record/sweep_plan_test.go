package record

import (
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"testing"

	"gorm.io/gorm"
)

// TestSweeperStatementsFindRowsByPrimaryKey: on MariaDB, the sweeper's DELETE and UPDATE find their
// rows by primary key (on a v1 table, by its unique key (scope, idem_key)) — never through the
// (status, expires_at) index, whose entries they would lock before the rows, nor by a scan — and the
// reads that list their keys use the status index, on a table mostly expired and on one where little
// is, for a full batch and for a few keys.
func TestSweeperStatementsFindRowsByPrimaryKey(t *testing.T) {
	db := backends[0].db(t, nil) // MariaDB
	for _, layout := range []string{"v2", "v1"} {
		t.Run(layout, func(t *testing.T) {
			var s *Store
			if layout == "v1" {
				s = v1Table(t, db)
			} else {
				s = newTable(t, db)
			}
			const rows, now = 4000, int64(100_000)
			var b strings.Builder
			for n := range rows {
				if n%1000 == 0 {
					if n > 0 {
						must(t, db.Exec(b.String()).Error)
					}
					b.Reset()
					b.WriteString("INSERT INTO " + s.q.quoted + " (scope, idem_key, status, fence, owner, error, lease_until, expires_at, created_at, updated_at) VALUES ")
				} else {
					b.WriteByte(',')
				}
				// 90% expired, the rest split between stale claims and live records.
				status, lease, expires := "SUCCEEDED", int64(0), int64(n)
				switch {
				case n%20 == 0:
					status, lease, expires = "PROCESSING", now-1, now+1000
				case n%20 == 1:
					expires = now + 1000
				}
				fmt.Fprintf(&b, "('s', 'k%05d', '%s', 1, 'o', '', %d, %d, 0, 0)", n, status, lease, expires)
			}
			must(t, db.Exec(b.String()).Error)
			must(t, db.Exec("ANALYZE TABLE "+s.q.quoted).Error)
			rowKey := "PRIMARY"
			if layout == "v1" {
				rowKey = "uk_scope_key"
			}
			listIndex := "idx_status_expires"
			if layout == "v1" {
				listIndex = "" // v1's indexes: (expires_at) and (status, lease_until); a plan may pick either
			}
			for _, n := range []int{maxBatch, 3} {
				// The keys of a batch, as the sweeper lists them.
				expired, k, err := s.keyArgs(ctxb, s.q.expiredKeys, []any{now, now, n}, []any{now, now})
				must(t, err)
				if k != n {
					t.Fatalf("%d expired keys listed, want %d", k, n)
				}
				stale, ks, err := s.keyArgs(ctxb, s.q.staleKeys, []any{now, now, n}, []any{RecoveredError, now, now, now})
				must(t, err)
				if ks != min(n, rows/20) {
					t.Fatalf("%d stale keys listed, want %d", ks, min(n, rows/20))
				}
				for _, c := range []struct {
					name, query string
					args        []any
					index       string
				}{
					{"expired keys", s.q.expiredKeys, []any{now, now, n}, listIndex},
					{"stale keys", s.q.staleKeys, []any{now, now, n}, listIndex},
					{"delete expired", keyList(s.q.delExpired, k), expired, rowKey},
					{"recover stale", keyList(s.q.recover, ks), stale, rowKey},
					{"recover one claim", s.q.recoverOne, []any{RecoveredError, now, now, now, "s", "k00000", 1, "o"}, rowKey},
				} {
					plan := explainMySQL(t, db, c.query, c.args)
					t.Logf("%s, batch of %d: %q", c.name, n, plan)
					if len(plan) != 1 || strings.Contains(plan[0], "type=ALL") || c.index != "" && !strings.Contains(plan[0], "key="+c.index+" ") {
						t.Errorf("%s, batch of %d: plan %q; want one read through %s, no scan", c.name, n, plan, c.index)
					}
				}
			}
		})
	}
}

// explainMySQL returns MariaDB's plan of query, one "type=... key=... extra=..." line per table read.
func explainMySQL(t *testing.T, db *gorm.DB, query string, args []any) []string {
	t.Helper()
	rows, err := db.Raw("EXPLAIN "+query, args...).Rows()
	if err != nil {
		t.Fatalf("EXPLAIN %s: %v", query, err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	must(t, err)
	var out []string
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		dest := make([]any, len(vals))
		for i := range vals {
			dest[i] = &vals[i]
		}
		must(t, rows.Scan(dest...))
		col := func(name string) string {
			if i := slices.IndexFunc(cols, func(c string) bool { return strings.EqualFold(c, name) }); i >= 0 {
				return vals[i].String
			}
			return ""
		}
		out = append(out, fmt.Sprintf("type=%s key=%s rows=%s extra=%s", col("type"), col("key"), col("rows"), col("Extra")))
	}
	must(t, rows.Err())
	return out
}

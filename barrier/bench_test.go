package barrier

import (
	"context"
	"database/sql"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/dtm-labs/client/dtmcli"
	"gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/idemkit/idemkit/internal/testsvc"
)

// BenchmarkBarrierMariaDB compares, on MariaDB and in one run (interleaved), a bare business transaction (one INSERT),
// the same transaction behind this barrier (plain and with gorm's PrepareStmt, each against the bare
// transaction in the same gorm mode) and behind dtmcli's
// barrier (BranchBarrier.CallWithDB), on the same barrier table. Every iteration is the first delivery of
// a new saga action, so each barrier inserts its row. Both DSN flavours are measured: the driver's
// default (each statement with arguments is prepared, executed and closed: three round trips) and
// interpolateParams=true (one round trip; what DTM's own examples use).
func BenchmarkBarrierMariaDB(b *testing.B) {
	testsvc.MySQL(b, nil) // creates the database, or skips
	ctx := context.Background()
	for _, flavour := range []struct{ name, params string }{
		{"default", ""},
		{"interpolateParams", "?interpolateParams=true"},
	} {
		open := func(prepare bool) *gorm.DB {
			db, err := gorm.Open(mysql.Open(testsvc.MySQLDSN()+testsvc.Database+flavour.params),
				&gorm.Config{Logger: logger.Discard, PrepareStmt: prepare})
			if err != nil {
				b.Fatal(err)
			}
			sqlDB, _ := db.DB()
			b.Cleanup(func() { _ = sqlDB.Close() })
			return db
		}
		db, pdb := open(false), open(true)
		sqlDB, _ := db.DB()
		g := newGormTable(b, db)
		gp, err := NewGorm(pdb, &GormOptions{Table: g.Table()})
		if err != nil {
			b.Fatal(err)
		}
		busiTable := testsvc.Name("bench_")
		testsvc.DropTable(b, db, busiTable)
		if err := db.Exec("CREATE TABLE " + busiTable + " (id bigint PRIMARY KEY AUTO_INCREMENT, gid varchar(128) NOT NULL, v int NOT NULL)").Error; err != nil {
			b.Fatal(err)
		}
		insert := "INSERT INTO " + busiTable + " (gid, v) VALUES (?, ?)"
		business := func(tx *gorm.DB, gid string) error { return tx.Exec(insert, gid, 1).Error }

		// variants run the same business transaction for a new gid.
		variants := []struct {
			name string
			run  func(gid string) error
		}{
			{"bare-sql", func(gid string) error {
				tx, err := sqlDB.BeginTx(ctx, nil)
				if err != nil {
					return err
				}
				if _, err := tx.ExecContext(ctx, insert, gid, 1); err != nil {
					_ = tx.Rollback()
					return err
				}
				return tx.Commit()
			}},
			{"bare-gorm", func(gid string) error {
				return db.WithContext(ctx).Transaction(func(tx *gorm.DB) error { return business(tx, gid) })
			}},
			{"bare-gorm-prepared", func(gid string) error {
				return pdb.WithContext(ctx).Transaction(func(tx *gorm.DB) error { return business(tx, gid) })
			}},
			{"idemkit", func(gid string) error {
				br := &Branch{TransType: TransSaga, Gid: gid, BranchID: "01", Op: OpAction}
				return g.Transaction(ctx, br, func(tx *gorm.DB) error { return business(tx, gid) })
			}},
			{"idemkit-prepared", func(gid string) error {
				br := &Branch{TransType: TransSaga, Gid: gid, BranchID: "01", Op: OpAction}
				return gp.Transaction(ctx, br, func(tx *gorm.DB) error { return business(tx, gid) })
			}},
			{"dtmcli", func(gid string) error {
				bb := &dtmcli.BranchBarrier{TransType: TransSaga, Gid: gid, BranchID: "01", Op: OpAction,
					DBType: dtmcli.DBTypeMysql, BarrierTableName: g.Table()}
				return bb.CallWithDB(sqlDB, func(tx *sql.Tx) error {
					_, err := tx.Exec(insert, gid, 1)
					return err
				})
			}},
		}
		// The variants are interleaved (each iteration runs every variant once, in rotating order) so that
		// the machine's and the disk's ups and downs hit them alike; medians discard the outliers.
		b.Run(flavour.name, func(b *testing.B) {
			prefix := testsvc.Name("g")
			samples := make([][]time.Duration, len(variants))
			for i := 0; b.Loop(); i++ {
				for j := range variants {
					k := (i + j) % len(variants)
					gid := prefix + "-" + strconv.Itoa(k) + "-" + strconv.Itoa(i)
					start := time.Now()
					if err := variants[k].run(gid); err != nil {
						b.Fatalf("%s: %v", variants[k].name, err)
					}
					samples[k] = append(samples[k], time.Since(start))
				}
			}
			med := make(map[string]float64, len(variants))
			for k, v := range variants {
				med[v.name] = float64(median(samples[k]).Nanoseconds())
				b.ReportMetric(med[v.name], v.name+"-ns/op")
			}
			b.ReportMetric(med["idemkit"]/med["bare-gorm"], "idemkit/bare-gorm")
			b.ReportMetric(med["idemkit-prepared"]/med["bare-gorm-prepared"], "idemkit-prepared/bare-gorm-prepared")
			b.ReportMetric(med["dtmcli"]/med["bare-sql"], "dtmcli/bare-sql")
			b.ReportMetric(med["idemkit"]/med["dtmcli"], "idemkit/dtmcli")
			b.ReportMetric(med["idemkit-prepared"]/med["dtmcli"], "idemkit-prepared/dtmcli")
			b.ReportMetric(0, "ns/op") // the per-variant medians above are the measure
		})
	}
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

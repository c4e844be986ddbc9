package record

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testsvc"
)

// BenchmarkExecuteGroupCommit measures Execute mode without a Locker (a claim, a business INSERT in a
// transaction of its own, a finish) from 16 goroutines per core, with group commit and without
// (Options.NoBatch), on each server database:
//
//	go test -run '^$' -bench ExecuteGroupCommit -benchtime 3s -count 4 ./record
//
// Compare the two sub-benchmarks of one database within a run; the machine's load moves both.
func BenchmarkExecuteGroupCommit(b *testing.B) {
	for _, be := range []backend{backends[0], backends[1]} {
		for _, noBatch := range []bool{true, false} {
			name := be.name + "/batched"
			if noBatch {
				name = be.name + "/alone"
			}
			b.Run(name, func(b *testing.B) {
				db := be.db(b, nil)
				sqlDB, err := db.DB()
				must(b, err)
				sqlDB.SetMaxOpenConns(40)
				sqlDB.SetMaxIdleConns(40) // database/sql keeps 2 by default: the rest would be closed and dialled again
				table := testsvc.Name("t_rec_")
				testsvc.DropTable(b, db, table)
				s, err := New(db, &Options{Table: table, NoBatch: noBatch})
				must(b, err)
				must(b, s.CreateTable(ctxb))
				biz := testsvc.Name("t_biz_")
				testsvc.DropTable(b, db, biz)
				must(b, db.Exec("CREATE TABLE "+biz+" (k VARCHAR(64) NOT NULL)").Error)
				g, err := idemkit.New(s, nil)
				must(b, err)
				var seq atomic.Int64
				b.SetParallelism(16)
				b.ReportAllocs()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						key := strconv.FormatInt(seq.Add(1), 10)
						_, err := g.Do(ctxb, idemkit.Call{Scope: "bench", Key: key}, func(ctx context.Context) ([]byte, error) {
							return []byte("ok"), db.WithContext(ctx).Exec("INSERT INTO "+biz+" (k) VALUES (?)", key).Error
						})
						if err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		}
	}
}

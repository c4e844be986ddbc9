//go:build linux

package capacity

import (
	"context"
	"crypto/rand"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"gorm.io/gorm"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/record"
)

// sample is the record the size measurements store: a typical HTTP key and a result of size bytes.
func sample(now time.Time, key string, size int, status idemkit.Status) *idemkit.Record {
	var resp []byte
	if size > 0 {
		resp = make([]byte, size)
		_, _ = rand.Read(resp)
	}
	return &idemkit.Record{
		Scope: "POST /api/orders", Key: key, Status: status, Fence: 1, Owner: newKey()[:32],
		Fingerprint: newKey() + newKey()[:28], Response: resp,
		LeaseUntil: now.Add(30 * time.Second), ExpiresAt: now.Add(24 * time.Hour), CreatedAt: now, UpdatedAt: now,
	}
}

// fill inserts n sample records into s with o.Concurrency writers.
func fill(ctx context.Context, s *record.Store, n, size int, status idemkit.Status, o *Options) error {
	var next atomic.Int64
	var first error
	var once sync.Once
	var wg sync.WaitGroup
	now := time.Now()
	for range o.Concurrency {
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				if err := s.Insert(ctx, sample(now, newKey(), size, status)); err != nil {
					once.Do(func() { first = err })
					return
				}
			}
		})
	}
	wg.Wait()
	return first
}

// tableBytes returns InnoDB's data length (the clustered primary key: the rows) and index length (the
// secondary indexes) of table after ANALYZE TABLE, and its file size.
func tableBytes(db *gorm.DB, table string) (data, index, file float64, err error) {
	if err := db.Exec("ANALYZE TABLE " + table).Error; err != nil {
		return 0, 0, 0, err
	}
	var d, i int64
	if err := db.Raw("SELECT data_length, index_length FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?", table).
		Row().Scan(&d, &i); err != nil {
		return 0, 0, 0, err
	}
	var size int64
	_ = db.Raw("SELECT file_size FROM information_schema.innodb_sys_tablespaces WHERE name = CONCAT(DATABASE(), '/', ?)", table).Row().Scan(&size)
	return float64(d), float64(i), float64(size), nil
}

func measureBytes(ctx context.Context, db *gorm.DB, r *Report, o *Options) error {
	r.Records = o.Records
	for _, size := range []int{o.ResultSize, 0} {
		table := "size_" + strconv.Itoa(size) + "_" + newKey()[:6]
		s, err := record.New(db, &record.Options{Table: table})
		if err != nil {
			return err
		}
		if err := s.CreateTable(ctx); err != nil {
			return err
		}
		status := idemkit.StatusSucceeded
		if err := fill(ctx, s, o.Records, size, status, o); err != nil {
			return err
		}
		data, index, file, err := tableBytes(db, table)
		if err != nil {
			return err
		}
		pages := data + index
		if size > 0 {
			r.BytesPerRecord = pages / float64(o.Records)
			r.IndexBytesPerRecord = index / float64(o.Records)
			r.FileBytesPerRecord = file / float64(o.Records)
			r.sweepTable = table
		} else {
			r.BytesPerRecordMark = pages / float64(o.Records)
		}
	}
	return nil
}

func measureSweep(ctx context.Context, db *gorm.DB, pid int, r *Report, o *Options) error {
	s, err := record.New(db, &record.Options{Table: r.sweepTable})
	if err != nil {
		return err
	}
	now := time.Now().UnixMilli()
	// Every record becomes a stale claim (a holder that died), then an expired record.
	if err := db.Exec("UPDATE "+r.sweepTable+" SET status = 'PROCESSING', lease_until = ?", now-1000).Error; err != nil {
		return err
	}
	rate := func(step func() (int, error)) (perSec, micros float64, err error) {
		c0, err := procCPU(pid)
		if err != nil {
			return 0, 0, err
		}
		start := time.Now()
		total := 0
		for {
			n, err := step()
			if err != nil {
				return 0, 0, err
			}
			if n == 0 {
				break
			}
			total += n
		}
		took := time.Since(start)
		c1, err := procCPU(pid)
		if err != nil {
			return 0, 0, err
		}
		if total != o.Records {
			return 0, 0, fmt.Errorf("the sweeper handled %d records of %d", total, o.Records)
		}
		return float64(total) / took.Seconds(), float64((c1 - c0).Microseconds()) / float64(total), nil
	}
	const batch = 500 // sweep.DefaultBatchSize
	at := time.Now()
	if r.SweepRecoverPerSec, r.SweepRecoverDBMicros, err = rate(func() (int, error) { return s.RecoverStale(ctx, at, batch) }); err != nil {
		return err
	}
	if err := db.Exec("UPDATE "+r.sweepTable+" SET expires_at = ?", now-1000).Error; err != nil {
		return err
	}
	r.SweepDeletesPerSec, r.SweepDeleteDBMicros, err = rate(func() (int, error) { return s.DeleteExpired(ctx, at, batch) })
	return err
}

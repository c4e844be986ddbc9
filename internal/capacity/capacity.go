//go:build linux

package capacity

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/cluster"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/record"
)

// Defaults of [Options].
const (
	DefaultRecords     = 50_000
	DefaultDuration    = 5 * time.Second
	DefaultConcurrency = 16
	DefaultResultSize  = 256
	DefaultRounds      = 3
)

// Options size a run. The zero value works.
type Options struct {
	// Records is how many records (and Redis keys) the size and sweeper measurements write. Defaults
	// to DefaultRecords.
	Records int
	// Duration of each write-throughput measurement. Defaults to DefaultDuration.
	Duration time.Duration
	// Concurrency is the number of concurrent callers. Defaults to DefaultConcurrency.
	Concurrency int
	// ResultSize is the size of a stored result in bytes. Defaults to DefaultResultSize.
	ResultSize int
	// Rounds is the number of interleaved rounds of write measurements; each mode reports its
	// median. Defaults to DefaultRounds.
	Rounds int
	// Galera also measures Execute mode on a 3-node Galera cluster, one Guard per node.
	Galera bool
	// Log receives progress lines. Defaults to discarding them.
	Log io.Writer
}

func (o *Options) withDefaults() Options {
	var c Options
	if o != nil {
		c = *o
	}
	c.Records = cmp.Or(c.Records, DefaultRecords)
	c.Duration = cmp.Or(c.Duration, DefaultDuration)
	c.Concurrency = cmp.Or(c.Concurrency, DefaultConcurrency)
	c.ResultSize = cmp.Or(c.ResultSize, DefaultResultSize)
	c.Rounds = cmp.Or(c.Rounds, DefaultRounds)
	if c.Log == nil {
		c.Log = io.Discard
	}
	return c
}

// Write is one write-throughput measurement.
type Write struct {
	Mode string `json:"mode"`
	// What the mode writes per call.
	Writes string `json:"writes"`
	Calls  int64  `json:"calls"`
	// PerSecond is calls per second at the run's concurrency on this machine (not a capacity: the
	// machine is shared and the client runs on it too).
	PerSecond float64 `json:"per_second"`
	// DBMicros is mariadbd CPU time per call (all nodes, for Galera), in microseconds; PerDBCore is
	// its inverse: calls per second one fully used database core sustains.
	DBMicros  float64 `json:"db_cpu_us"`
	PerDBCore float64 `json:"per_db_core"`
	// GoMicros is this process's CPU time per call (client, Guard, driver), in microseconds.
	GoMicros float64 `json:"go_cpu_us"`
}

// Report holds every figure of a run.
type Report struct {
	Date        string  `json:"date"`
	Commit      string  `json:"commit,omitempty"`
	Machine     string  `json:"machine"`
	MariaDB     string  `json:"mariadb"`
	Redis       string  `json:"redis"`
	Flush       string  `json:"innodb_flush_log_at_trx_commit"`
	Concurrency int     `json:"concurrency"`
	Rounds      int     `json:"rounds"`
	ResultSize  int     `json:"result_size"`
	Writes      []Write `json:"writes"`
	// Bytes per record in InnoDB (data + indexes, after ANALYZE TABLE), with a ResultSize-byte result
	// and with none (Mark mode).
	BytesPerRecord       float64 `json:"bytes_per_record"`
	BytesPerRecordMark   float64 `json:"bytes_per_record_mark"`
	FileBytesPerRecord   float64 `json:"file_bytes_per_record"`
	Records              int     `json:"records"`
	SweepDeletesPerSec   float64 `json:"sweep_deletes_per_sec"`
	SweepDeleteDBMicros  float64 `json:"sweep_delete_db_cpu_us"`
	SweepRecoverPerSec   float64 `json:"sweep_recovers_per_sec"`
	SweepRecoverDBMicros float64 `json:"sweep_recover_db_cpu_us"`
	// Redis memory per in-flight lock and per cached result (ResultSize bytes), from used_memory.
	RedisBytesPerLock   float64 `json:"redis_bytes_per_lock"`
	RedisBytesPerCached float64 `json:"redis_bytes_per_cached"`
	// Redis CPU per Locker call, in microseconds.
	RedisAcquireMicros float64 `json:"redis_acquire_us"`
	RedisReleaseMicros float64 `json:"redis_release_us"`
	RedisReplayMicros  float64 `json:"redis_replay_us"`

	sweepTable string // the table measureBytes filled with results, swept by measureSweep
}

// Measure runs every measurement on private servers it starts and stops: a MariaDB, a Redis and,
// with Options.Galera, a 3-node Galera cluster. It needs Linux (CPU times from /proc).
func Measure(ctx context.Context, opts *Options) (*Report, error) {
	o := opts.withDefaults()
	r := &Report{Date: time.Now().UTC().Format("2006-01-02"), Machine: machine(), Concurrency: o.Concurrency, ResultSize: o.ResultSize}
	logf := func(format string, args ...any) { fmt.Fprintf(o.Log, "capacity: "+format+"\n", args...) }

	logf("starting a private MariaDB and Redis")
	m, err := cluster.StartMariaDB(ctx)
	if err != nil {
		return nil, err
	}
	defer m.Stop()
	rn, err := cluster.StartRedis(ctx)
	if err != nil {
		return nil, err
	}
	defer rn.Stop()

	db, err := open(m, "", 4)
	if err != nil {
		return nil, err
	}
	if err := db.Exec("CREATE DATABASE capacity").Error; err != nil {
		return nil, err
	}
	closeDB(db)
	if db, err = open(m, "capacity", o.Concurrency+4); err != nil {
		return nil, err
	}
	defer closeDB(db)
	_ = db.Raw("SELECT VERSION(), @@innodb_flush_log_at_trx_commit").Row().Scan(&r.MariaDB, &r.Flush)
	pid, err := m.PID()
	if err != nil {
		return nil, err
	}

	// Rounds interleave the modes, so that a change in the machine's load hits them all alike; each
	// mode reports its median round.
	modes := []string{"bare", "mark-tx", "tx", "execute"}
	writes := make([]Write, len(modes))
	calls := make([]func(context.Context, int) error, len(modes))
	for i, mode := range modes {
		if writes[i], calls[i], err = prepareWrite(ctx, db, []*gorm.DB{db}, mode, &o); err != nil {
			return nil, fmt.Errorf("capacity: %s: %w", mode, err)
		}
	}
	rounds := make([][]Write, len(modes))
	for round := range o.Rounds {
		for i, mode := range modes {
			logf("write throughput, round %d of %d: %s, %d callers, %s", round+1, o.Rounds, mode, o.Concurrency, o.Duration)
			w, err := measureRound(ctx, writes[i], []int{pid}, calls[i], &o)
			if err != nil {
				return nil, fmt.Errorf("capacity: %s: %w", mode, err)
			}
			rounds[i] = append(rounds[i], w)
		}
	}
	for i := range modes {
		r.Writes = append(r.Writes, median(rounds[i]))
	}
	r.Rounds = o.Rounds

	logf("bytes per record: %d records with a %d-byte result, then %d without", o.Records, o.ResultSize, o.Records)
	if err := measureBytes(ctx, db, r, &o); err != nil {
		return nil, err
	}
	logf("sweeper: recovering and deleting %d records", o.Records)
	if err := measureSweep(ctx, db, pid, r, &o); err != nil {
		return nil, err
	}

	logf("Redis memory and CPU per lock, cached result and replay (%d keys)", o.Records)
	if err := measureRedis(ctx, rn, r, &o); err != nil {
		return nil, err
	}

	if o.Galera {
		logf("starting a 3-node Galera cluster")
		g, err := cluster.StartGalera(ctx, nil)
		if err != nil {
			return nil, err
		}
		defer g.Stop()
		w, err := measureGalera(ctx, g, &o)
		if err != nil {
			return nil, err
		}
		r.Writes = append(r.Writes, w)
	}
	return r, nil
}

func open(n *cluster.MariaNode, dbname string, conns int) (*gorm.DB, error) {
	db, err := gorm.Open(mysql.Open(n.DSN(dbname)), &gorm.Config{Logger: logger.Discard, SkipDefaultTransaction: true})
	if err != nil {
		return nil, err
	}
	sqlDB, err := db.DB()
	if err != nil {
		return nil, err
	}
	sqlDB.SetMaxOpenConns(conns)
	sqlDB.SetMaxIdleConns(conns)
	return db, nil
}

func closeDB(db *gorm.DB) {
	if sqlDB, err := db.DB(); err == nil {
		_ = sqlDB.Close()
	}
}

// newKey returns a random 36-character key, like a UUID.
func newKey() string {
	var b [18]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// procCPU returns the CPU time (user + system) the process pid has used, from /proc.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces; fields after its closing parenthesis are fixed.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("unexpected /proc/%d/stat", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("unexpected /proc/%d/stat", pid)
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	const ticks = 100 // USER_HZ, the unit of /proc times on Linux
	return time.Duration(ut+st) * time.Second / ticks, nil
}

func cpuOf(pids []int) (time.Duration, error) {
	var total time.Duration
	for _, p := range pids {
		d, err := procCPU(p)
		if err != nil {
			return 0, err
		}
		total += d
	}
	return total, nil
}

// selfCPU returns this process's CPU time.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// run calls f from o.Concurrency goroutines for o.Duration and returns the calls made, the elapsed
// time and the CPU used by pids and by this process.
func run(ctx context.Context, pids []int, o *Options, f func(ctx context.Context, worker int) error) (calls int64, took, db, self time.Duration, err error) {
	runtime.GC()
	db0, err := cpuOf(pids)
	if err != nil {
		return 0, 0, 0, 0, err
	}
	self0 := selfCPU()
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, o.Duration)
	defer cancel()
	var n atomic.Int64
	var first error
	var once sync.Once
	var wg sync.WaitGroup
	for w := range o.Concurrency {
		wg.Go(func() {
			for ctx.Err() == nil {
				if err := f(ctx, w); err != nil {
					if ctx.Err() != nil {
						return
					}
					once.Do(func() { first = err })
					cancel()
					return
				}
				n.Add(1)
			}
		})
	}
	wg.Wait()
	took = time.Since(start)
	db1, err := cpuOf(pids)
	if err != nil {
		return 0, 0, 0, 0, err
	}
	return n.Load(), took, db1 - db0, selfCPU() - self0, first
}

// measureWrites measures one write mode through one Guard per database in dbs (pids are the
// servers' processes) once.
func measureWrites(ctx context.Context, meta *gorm.DB, dbs []*gorm.DB, pids []int, mode string, o *Options) (Write, error) {
	w, f, err := prepareWrite(ctx, meta, dbs, mode, o)
	if err != nil {
		return w, err
	}
	return measureRound(ctx, w, pids, f, o)
}

// measureRound runs f once for o.Duration and fills w's figures.
func measureRound(ctx context.Context, w Write, pids []int, f func(ctx context.Context, worker int) error, o *Options) (Write, error) {
	calls, took, dbCPU, self, err := run(ctx, pids, o, f)
	if err != nil {
		return w, err
	}
	if calls == 0 {
		return w, errors.New("no call completed")
	}
	w.Calls = calls
	w.PerSecond = float64(calls) / took.Seconds()
	w.DBMicros = float64(dbCPU.Microseconds()) / float64(calls)
	if w.DBMicros > 0 {
		w.PerDBCore = 1e6 / w.DBMicros
	}
	w.GoMicros = float64(self.Microseconds()) / float64(calls)
	return w, nil
}

// median returns the round with the median database CPU per call (rounds must not be empty).
func median(rounds []Write) Write {
	s := slices.Clone(rounds)
	slices.SortFunc(s, func(a, b Write) int { return cmp.Compare(a.DBMicros, b.DBMicros) })
	return s[len(s)/2]
}

// prepareWrite creates mode's tables and returns the Write to fill and the call to measure.
func prepareWrite(ctx context.Context, meta *gorm.DB, dbs []*gorm.DB, mode string, o *Options) (Write, func(ctx context.Context, worker int) error, error) {
	table := "rec_" + strings.ReplaceAll(mode, "-", "_") + "_" + newKey()[:6]
	result := make([]byte, o.ResultSize)
	w := Write{Mode: mode}
	var f func(ctx context.Context, worker int) error
	if mode == "bare" {
		w.Writes = "one INSERT of a narrow row in its own transaction (reference, no idemkit)"
		if err := meta.Exec("CREATE TABLE " + table + " (k VARCHAR(64) PRIMARY KEY, v VARCHAR(64) NOT NULL)").Error; err != nil {
			return w, nil, err
		}
		f = func(ctx context.Context, worker int) error {
			return dbs[worker%len(dbs)].WithContext(ctx).Transaction(func(tx *gorm.DB) error {
				return tx.Exec("INSERT INTO "+table+" (k, v) VALUES (?, ?)", newKey(), "x").Error
			})
		}
	} else {
		stores := make([]*record.Store, len(dbs))
		guards := make([]*idemkit.Guard, len(dbs))
		for i, db := range dbs {
			s, err := record.New(db, &record.Options{Table: table})
			if err != nil {
				return w, nil, err
			}
			if i == 0 {
				if err := s.CreateTable(ctx); err != nil {
					return w, nil, err
				}
			}
			stores[i] = s
			if guards[i], err = idemkit.New(s, nil); err != nil {
				return w, nil, err
			}
		}
		fn := func(context.Context) ([]byte, error) { return result, nil }
		switch mode {
		case "execute":
			w.Writes = "claim INSERT + finish UPDATE, each its own transaction (no Locker)"
			f = func(ctx context.Context, worker int) error {
				_, err := guards[worker%len(guards)].Do(ctx, idemkit.Call{Scope: "capacity", Key: newKey()}, fn)
				return err
			}
		case "tx":
			w.Writes = "claim INSERT + finish UPDATE in one transaction (no business write, no Locker)"
			f = func(ctx context.Context, worker int) error {
				i := worker % len(guards)
				return dbs[i].WithContext(ctx).Transaction(func(tx *gorm.DB) error {
					_, err := guards[i].DoTx(ctx, stores[i].WithTx(tx), idemkit.Call{Scope: "capacity", Key: newKey()}, fn)
					return err
				})
			}
		case "mark-tx":
			w.Writes = "one INSERT in one transaction, no stored result (no Locker)"
			f = func(ctx context.Context, worker int) error {
				i := worker % len(guards)
				return dbs[i].WithContext(ctx).Transaction(func(tx *gorm.DB) error {
					return guards[i].MarkTx(ctx, stores[i].WithTx(tx), idemkit.Call{Scope: "capacity", Key: newKey()},
						func(context.Context) error { return nil })
				})
			}
		default:
			return w, nil, fmt.Errorf("unknown mode %q", mode)
		}
	}
	return w, f, nil
}

// measureGalera measures Execute mode with one Guard per Galera node.
func measureGalera(ctx context.Context, g *cluster.Galera, o *Options) (Write, error) {
	admin, err := open(g.Node(0), "", 2)
	if err != nil {
		return Write{}, err
	}
	defer closeDB(admin)
	if err := admin.Exec("CREATE DATABASE capacity").Error; err != nil {
		return Write{}, err
	}
	var dbs []*gorm.DB
	var pids []int
	for _, n := range g.Nodes() {
		db, err := open(n, "capacity", o.Concurrency/3+2)
		if err != nil {
			return Write{}, err
		}
		defer closeDB(db)
		dbs = append(dbs, db)
		pid, err := n.PID()
		if err != nil {
			return Write{}, err
		}
		pids = append(pids, pid)
	}
	w, err := measureWrites(ctx, dbs[0], dbs, pids, "execute", o)
	w.Mode = "execute, Galera (3 nodes)"
	w.Writes = "as execute, one Guard per node; DB CPU summed over the 3 nodes"
	return w, err
}

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

// tableBytes returns InnoDB's data + index length of table after ANALYZE TABLE, and its file size.
func tableBytes(db *gorm.DB, table string) (pages, file float64, err error) {
	if err := db.Exec("ANALYZE TABLE " + table).Error; err != nil {
		return 0, 0, err
	}
	var data, index int64
	if err := db.Raw("SELECT data_length, index_length FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?", table).
		Row().Scan(&data, &index); err != nil {
		return 0, 0, err
	}
	var size int64
	_ = db.Raw("SELECT file_size FROM information_schema.innodb_sys_tablespaces WHERE name = CONCAT(DATABASE(), '/', ?)", table).Row().Scan(&size)
	return float64(data + index), float64(size), nil
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
		pages, file, err := tableBytes(db, table)
		if err != nil {
			return err
		}
		if size > 0 {
			r.BytesPerRecord = pages / float64(o.Records)
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

// redisInfo returns the numeric field of INFO section.
func redisInfo(ctx context.Context, c *redis.Client, section, field string) (float64, error) {
	s, err := c.Info(ctx, section).Result()
	if err != nil {
		return 0, err
	}
	for l := range strings.SplitSeq(s, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), field+":"); ok {
			return strconv.ParseFloat(v, 64)
		}
	}
	return 0, fmt.Errorf("INFO %s has no %s", section, field)
}

func redisCPU(ctx context.Context, c *redis.Client) (float64, error) {
	u, err := redisInfo(ctx, c, "cpu", "used_cpu_user")
	if err != nil {
		return 0, err
	}
	s, err := redisInfo(ctx, c, "cpu", "used_cpu_sys")
	return u + s, err
}

func measureRedis(ctx context.Context, rn *cluster.RedisNode, r *Report, o *Options) error {
	c := redis.NewClient(&redis.Options{Addr: rn.Addr(), ContextTimeoutEnabled: true, PoolSize: o.Concurrency + 4})
	defer c.Close()
	if v, err := c.Info(ctx, "server").Result(); err == nil {
		for l := range strings.SplitSeq(v, "\n") {
			if s, ok := strings.CutPrefix(strings.TrimSpace(l), "redis_version:"); ok {
				r.Redis = s
			}
		}
	}
	l := lock.New(c, &lock.Options{Prefix: "capacity:"})
	keys := make([]string, o.Records)
	tokens := make([]string, o.Records)
	for i := range keys {
		keys[i] = "POST /api/orders\x00" + newKey()
		tokens[i] = newKey()[:32]
	}
	result := make([]byte, o.ResultSize)
	_, _ = rand.Read(result)
	phase := func(f func(i int) error) (memDelta, cpuMicros float64, err error) {
		m0, err := redisInfo(ctx, c, "memory", "used_memory")
		if err != nil {
			return 0, 0, err
		}
		c0, err := redisCPU(ctx, c)
		if err != nil {
			return 0, 0, err
		}
		var next atomic.Int64
		var first error
		var once sync.Once
		var wg sync.WaitGroup
		for range o.Concurrency {
			wg.Go(func() {
				for {
					i := int(next.Add(1)) - 1
					if i >= len(keys) {
						return
					}
					if err := f(i); err != nil {
						once.Do(func() { first = err })
						return
					}
				}
			})
		}
		wg.Wait()
		if first != nil {
			return 0, 0, first
		}
		m1, err := redisInfo(ctx, c, "memory", "used_memory")
		if err != nil {
			return 0, 0, err
		}
		c1, err := redisCPU(ctx, c)
		if err != nil {
			return 0, 0, err
		}
		n := float64(len(keys))
		return (m1 - m0) / n, (c1 - c0) * 1e6 / n, nil
	}
	var err error
	if r.RedisBytesPerLock, r.RedisAcquireMicros, err = phase(func(i int) error {
		_, err := l.Acquire(ctx, keys[i], tokens[i], 10*time.Minute)
		return err
	}); err != nil {
		return err
	}
	var perReleaseDelta float64
	if perReleaseDelta, r.RedisReleaseMicros, err = phase(func(i int) error {
		return l.Release(ctx, keys[i], tokens[i], result, time.Hour)
	}); err != nil {
		return err
	}
	r.RedisBytesPerCached = r.RedisBytesPerLock + perReleaseDelta
	_, r.RedisReplayMicros, err = phase(func(i int) error {
		v, err := l.Acquire(ctx, keys[i], "replayer", 10*time.Minute)
		if err == nil && v == nil {
			err = errors.New("a cached result was not found")
		}
		return err
	})
	return err
}

// machine describes the CPU and core count.
func machine() string {
	cpu := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for l := range strings.SplitSeq(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				cpu = strings.TrimSpace(v)
				break
			}
		}
	}
	return fmt.Sprintf("%s, %d cores, %s", cpu, runtime.NumCPU(), runtime.Version())
}

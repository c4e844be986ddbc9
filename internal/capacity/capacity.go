//go:build linux

package capacity

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/idemkit/idemkit/internal/cluster"
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
	// Records is how many records (and Redis keys) the size, sweeper and Redis measurements write.
	// Defaults to DefaultRecords.
	Records int
	// Duration of each call-throughput measurement. Defaults to DefaultDuration.
	Duration time.Duration
	// Concurrency is the number of concurrent callers. Defaults to DefaultConcurrency.
	Concurrency int
	// ResultSize is the size of a stored result in bytes. Defaults to DefaultResultSize.
	ResultSize int
	// Rounds is the number of interleaved rounds of call measurements; each mode reports its median.
	// Defaults to DefaultRounds.
	Rounds int
	// Galera also measures Tx and Execute modes (without a Locker) on a 3-node Galera cluster, one
	// Guard per node.
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

// Write is one throughput measurement of a guarded call (a new key, or a replay).
type Write struct {
	Mode string `json:"mode"`
	// What the mode does per call, the SQL statements it sends ("" when it sends none) and the Redis
	// commands ("" without a Locker).
	Writes     string `json:"writes"`
	Statements string `json:"statements,omitempty"`
	Redis      string `json:"redis,omitempty"`
	Locker     bool   `json:"locker"`
	Calls      int64  `json:"calls"`
	// PerSecond is calls per second at the run's concurrency on this machine (not a capacity: the
	// machine is shared and the client runs on it too).
	PerSecond float64 `json:"per_second"`
	// DBMicros is mariadbd CPU time per call (all nodes, for Galera), in microseconds; PerDBCore is
	// its inverse, calls per second one fully used database core sustains (0 for a mode that sends no
	// SQL, whose DBMicros is the server's background work only).
	DBMicros  float64 `json:"db_cpu_us"`
	PerDBCore float64 `json:"per_db_core"`
	// RedisMicros is redis-server CPU time per call, in microseconds (modes with a Locker).
	RedisMicros float64 `json:"redis_cpu_us,omitempty"`
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
	// and with none (Mark mode); IndexBytesPerRecord is the secondary index's share (status,
	// expires_at) of the first.
	BytesPerRecord       float64 `json:"bytes_per_record"`
	IndexBytesPerRecord  float64 `json:"index_bytes_per_record"`
	BytesPerRecordMark   float64 `json:"bytes_per_record_mark"`
	FileBytesPerRecord   float64 `json:"file_bytes_per_record"`
	Records              int     `json:"records"`
	SweepDeletesPerSec   float64 `json:"sweep_deletes_per_sec"`
	SweepDeleteDBMicros  float64 `json:"sweep_delete_db_cpu_us"`
	SweepRecoverPerSec   float64 `json:"sweep_recovers_per_sec"`
	SweepRecoverDBMicros float64 `json:"sweep_recover_db_cpu_us"`
	// Redis memory per in-flight lock and per cached result (the value a Guard caches for a
	// ResultSize-byte result, CachedValueSize bytes), from used_memory; one key each.
	RedisBytesPerLock   float64 `json:"redis_bytes_per_lock"`
	RedisBytesPerCached float64 `json:"redis_bytes_per_cached"`
	CachedValueSize     int64   `json:"cached_value_size"`
	// Redis CPU per Locker call, in microseconds.
	RedisAcquireMicros float64 `json:"redis_acquire_us"`
	RedisReleaseMicros float64 `json:"redis_release_us"`
	RedisReplayMicros  float64 `json:"redis_replay_us"`
	// LoadStart and LoadEnd are the machine's 1-, 5- and 15-minute load averages when the run began
	// and ended (the machine is shared: CPU figures hold under load better than throughput does).
	LoadStart string `json:"load_average_start"`
	LoadEnd   string `json:"load_average_end"`

	sweepTable string // the table measureBytes filled with results, swept by measureSweep
}

// Measure runs every measurement on private servers it starts and stops: a MariaDB, a Redis and,
// with Options.Galera, a 3-node Galera cluster. It needs Linux (CPU times from /proc).
func Measure(ctx context.Context, opts *Options) (*Report, error) {
	o := opts.withDefaults()
	r := &Report{Date: time.Now().UTC().Format("2006-01-02"), Machine: machine(), Concurrency: o.Concurrency, ResultSize: o.ResultSize,
		LoadStart: loadAverage()}
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
	rdb := redis.NewClient(&redis.Options{Addr: rn.Addr(), ContextTimeoutEnabled: true, PoolSize: o.Concurrency + 4})
	defer rdb.Close()
	r.Redis = redisVersion(ctx, rdb)

	// Rounds interleave the modes, so that a change in the machine's load hits them all alike; each
	// mode reports its median round.
	t := &target{meta: db, dbs: []*gorm.DB{db}, pids: []int{pid}, rdb: rdb}
	writes := make([]Write, len(writeModes))
	calls := make([]func(context.Context, int) error, len(writeModes))
	for i, mode := range writeModes {
		if writes[i], calls[i], err = prepareWrite(ctx, t, mode, &o); err != nil {
			return nil, fmt.Errorf("capacity: %s: %w", mode, err)
		}
	}
	rounds := make([][]Write, len(writeModes))
	for round := range o.Rounds {
		for i, mode := range writeModes {
			logf("calls, round %d of %d: %s, %d callers, %s", round+1, o.Rounds, mode, o.Concurrency, o.Duration)
			w, err := measureRound(ctx, writes[i], t, calls[i], &o)
			if err != nil {
				return nil, fmt.Errorf("capacity: %s: %w", mode, err)
			}
			rounds[i] = append(rounds[i], w)
		}
	}
	for i := range writeModes {
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
	if err := measureRedis(ctx, rdb, r, &o); err != nil {
		return nil, err
	}

	if o.Galera {
		logf("starting a 3-node Galera cluster")
		g, err := cluster.StartGalera(ctx, nil)
		if err != nil {
			return nil, err
		}
		defer g.Stop()
		ws, err := measureGalera(ctx, g, &o)
		if err != nil {
			return nil, err
		}
		r.Writes = append(r.Writes, ws...)
	}
	r.LoadEnd = loadAverage()
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

// loadAverage returns the 1-, 5- and 15-minute load averages from /proc/loadavg, or "unknown".
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
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

package bench

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// ServerStats are machine-wide figures read around a segment, outside the counted connections: CPU
// time of this process, of redis-server (INFO cpu) and of mariadbd (/proc), InnoDB's redo log fsyncs
// and row lock waits. The server figures include whatever other clients of the same servers did
// meanwhile (this machine is shared), so they are indicative.
type ServerStats struct {
	SelfCPU       float64 `json:"self_cpu"` // seconds
	RedisCPU      float64 `json:"redis_cpu"`
	MariaDBCPU    float64 `json:"mariadb_cpu"`
	LogFsyncs     int64   `json:"log_fsyncs"`
	RowLockWaits  int64   `json:"row_lock_waits"`
	RowLockTimeMs int64   `json:"row_lock_time_ms"`
}

// Sub returns s-o.
func (s ServerStats) Sub(o ServerStats) ServerStats {
	return ServerStats{s.SelfCPU - o.SelfCPU, s.RedisCPU - o.RedisCPU, s.MariaDBCPU - o.MariaDBCPU,
		s.LogFsyncs - o.LogFsyncs, s.RowLockWaits - o.RowLockWaits, s.RowLockTimeMs - o.RowLockTimeMs}
}

type diag struct {
	db         *sql.DB
	rdb        *redis.Client
	mariadbPID string
}

func openDiag(dsn string, ropts *redis.Options) *diag {
	d := &diag{mariadbPID: findPID("mariadbd", "mysqld")}
	d.db, _ = sql.Open("mysql", dsn)
	if d.db != nil {
		d.db.SetMaxOpenConns(1)
	}
	o := *ropts
	o.PoolSize = 1
	d.rdb = redis.NewClient(&o)
	return d
}

func (d *diag) close() {
	if d.db != nil {
		_ = d.db.Close()
	}
	_ = d.rdb.Close()
}

func (d *diag) stats(ctx context.Context) ServerStats {
	var s ServerStats
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		s.SelfCPU = tv(ru.Utime) + tv(ru.Stime)
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if info, err := d.rdb.Info(ctx, "cpu").Result(); err == nil {
		for _, l := range strings.Split(info, "\n") {
			k, v, ok := strings.Cut(strings.TrimSpace(l), ":")
			if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
				f, _ := strconv.ParseFloat(v, 64)
				s.RedisCPU += f
			}
		}
	}
	if d.mariadbPID == "" { // not found at start (the scan of /proc can race with exiting processes)
		d.mariadbPID = findPID("mariadbd", "mysqld")
	}
	if d.mariadbPID != "" {
		s.MariaDBCPU = procCPU(d.mariadbPID)
	}
	if d.db != nil {
		rows, err := d.db.QueryContext(ctx, "SHOW GLOBAL STATUS WHERE Variable_name IN ('Innodb_data_fsyncs', 'Innodb_row_lock_waits', 'Innodb_row_lock_time')")
		if err == nil {
			for rows.Next() {
				var k string
				var v int64
				if rows.Scan(&k, &v) == nil {
					switch k {
					case "Innodb_data_fsyncs":
						s.LogFsyncs = v
					case "Innodb_row_lock_waits":
						s.RowLockWaits = v
					case "Innodb_row_lock_time":
						s.RowLockTimeMs = v
					}
				}
			}
			_ = rows.Close()
		}
	}
	return s
}

func tv(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }

// findPID returns the pid of the first process whose command name is one of names.
func findPID(names ...string) string {
	dirs, _ := filepath.Glob("/proc/[0-9]*/comm")
	for _, f := range dirs {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		comm := strings.TrimSpace(string(b))
		for _, n := range names {
			if comm == n {
				return filepath.Base(filepath.Dir(f))
			}
		}
	}
	return ""
}

// procCPU returns the user+system CPU seconds of pid from /proc/pid/stat.
func procCPU(pid string) float64 {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 {
		s = s[i+1:]
	}
	f := strings.Fields(s) // f[0] is the state (field 3); utime and stime are fields 14 and 15
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100 // USER_HZ is 100 on Linux
}

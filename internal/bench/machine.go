package bench

import (
	"context"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// Machine describes where a run happened.
type Machine struct {
	CPU      string `json:"cpu"`
	Cores    int    `json:"cores"`
	MemoryMB int    `json:"memory_mb"`
	Kernel   string `json:"kernel"`
	Go       string `json:"go"`
	MariaDB  string `json:"mariadb"`
	Redis    string `json:"redis"`
	Load     string `json:"load_at_start"`
	LoadEnd  string `json:"load_at_end,omitempty"`
	Flush    string `json:"innodb_flush_log_at_trx_commit"`
}

// Describe reads /proc and asks the services for their versions.
func Describe(ctx context.Context, e *Env) Machine {
	m := Machine{Cores: runtime.NumCPU(), Go: runtime.Version(), Load: loadavg()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		f := strings.Fields(string(b))
		if len(f) > 1 {
			kb, _ := strconv.Atoi(f[1])
			m.MemoryMB = kb / 1024
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	qctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	_ = e.SQL.QueryRowContext(qctx, "SELECT VERSION(), @@innodb_flush_log_at_trx_commit").Scan(&m.MariaDB, &m.Flush)
	if info, err := e.Redis.Info(qctx, "server").Result(); err == nil {
		for _, l := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(l), "redis_version:"); ok {
				m.Redis = v
			}
		}
	}
	return m
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

func load1() float64 {
	f := strings.Fields(loadavg())
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

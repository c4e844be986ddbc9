//go:build unix

package chaos

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	_ "github.com/go-sql-driver/mysql" // the "mysql" database/sql driver
)

// Bounds of the private MariaDB's lifecycle.
const (
	mariadbInstallTimeout = 2 * time.Minute
	mariadbStartTimeout   = time.Minute
	mariadbStopGrace      = 30 * time.Second
)

// Database is the database the harness creates on its private server.
const Database = "chaos"

// mariaDB is a private mariadbd: its own data directory, socket, pid file and loopback port, so the
// shared server other tests use is never touched. Stop and Restart use signals. Its methods are
// safe for concurrent use.
type mariaDB struct {
	procs *procSet
	dir   string
	port  int
	bin   string
	args  []string

	mu    sync.Mutex
	p     *proc
	runs  int
	crash bool // the next restart uses SIGKILL instead of SIGTERM
}

// findBinary returns the first of names found on PATH or in /usr/sbin, /usr/local/sbin.
func findBinary(names ...string) (string, error) {
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p, nil
		}
		for _, d := range []string{"/usr/sbin", "/usr/local/sbin", "/usr/local/mysql/bin"} {
			p := filepath.Join(d, n)
			if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
				return p, nil
			}
		}
	}
	return "", fmt.Errorf("none of %v found on PATH or in /usr/sbin", names)
}

// MariaDBAvailable reports whether the binaries for a private MariaDB (mariadbd or mysqld and
// mariadb-install-db or mysql_install_db) are installed, and if not, why.
func MariaDBAvailable() error {
	if _, err := findBinary("mariadbd", "mysqld"); err != nil {
		return err
	}
	_, err := findBinary("mariadb-install-db", "mysql_install_db")
	return err
}

// startMariaDB installs a fresh data directory under dir and starts mariadbd on a free loopback
// port; it waits (bounded) until the server answers.
func startMariaDB(ctx context.Context, procs *procSet, dir string, logf func(string, ...any)) (*mariaDB, error) {
	bin, err := findBinary("mariadbd", "mysqld")
	if err != nil {
		return nil, err
	}
	install, err := findBinary("mariadb-install-db", "mysql_install_db")
	if err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	// A private tmpdir: a mariadbd that starts deletes every "#sql…" file in its tmpdir, and this
	// one restarts again and again — with /tmp it would take the temporary tables of every other
	// MariaDB on the machine (another test's bootstrap failed on that once).
	tmp := filepath.Join(dir, "tmp")
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return nil, err
	}
	asRoot := os.Geteuid() == 0
	args := []string{"--no-defaults", "--datadir=" + data, "--tmpdir=" + tmp, "--auth-root-authentication-method=normal", "--skip-test-db"}
	if asRoot {
		args = append(args, "--user=root")
	}
	ictx, cancel := context.WithTimeout(ctx, mariadbInstallTimeout)
	defer cancel()
	logPath := filepath.Join(dir, "install.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ictx, install, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = sysProcAttr()
	start := time.Now()
	err = cmd.Run()
	logFile.Close()
	if err != nil {
		return nil, fmt.Errorf("%s: %w\n%s", filepath.Base(install), err, tailFile(logPath, 2000))
	}
	logf("mariadb: data directory installed in %s", time.Since(start).Round(time.Millisecond))

	m := &mariaDB{procs: procs, dir: dir, bin: bin}
	var lastErr error
	for range 3 { // the free port may be taken before mariadbd binds it
		if m.port, err = freePort(); err != nil {
			return nil, err
		}
		m.args = []string{
			"--no-defaults", "--datadir=" + data, "--tmpdir=" + tmp,
			"--socket=" + filepath.Join(dir, "mysqld.sock"), "--pid-file=" + filepath.Join(dir, "mysqld.pid"),
			"--port=" + strconv.Itoa(m.port), "--bind-address=127.0.0.1", "--skip-name-resolve",
			"--skip-log-bin", "--log-error=" + filepath.Join(dir, "error.log"),
			"--innodb-buffer-pool-size=64M",
			// Committed transactions reach the OS at every commit: a killed mariadbd loses none of
			// them (only an OS crash could), and commits cost no fsync on this shared machine.
			"--innodb-flush-log-at-trx-commit=2",
			// A frozen worker's open transaction must not block the others for 50s.
			"--innodb-lock-wait-timeout=2",
			"--max-connections=400",
		}
		if asRoot {
			m.args = append(m.args, "--user=root")
		}
		if lastErr = m.start(ctx); lastErr == nil {
			return m, nil
		}
	}
	return nil, lastErr
}

// DSN returns the go-sql-driver DSN of database db on the server, with short dial and I/O timeouts.
func (m *mariaDB) DSN(db string) string {
	return fmt.Sprintf("root@tcp(127.0.0.1:%d)/%s?timeout=2s&readTimeout=10s&writeTimeout=10s", m.port, db)
}

func (m *mariaDB) start(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.startLocked(ctx)
}

func (m *mariaDB) startLocked(ctx context.Context) error {
	m.runs++
	out, err := os.OpenFile(filepath.Join(m.dir, "stdout.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer out.Close()
	cmd := exec.Command(m.bin, m.args...)
	cmd.Stdout, cmd.Stderr = out, out
	p, err := m.procs.start("mariadbd", cmd)
	if err != nil {
		return err
	}
	m.p = p
	if err := waitSQL(ctx, "mysql", m.DSN(""), p, mariadbStartTimeout); err != nil {
		p.kill()
		m.procs.forget(p)
		m.p = nil
		return fmt.Errorf("mariadbd on port %d: %w\n%s", m.port, err, tailFile(filepath.Join(m.dir, "error.log"), 3000))
	}
	return nil
}

// waitSQL waits until dsn (of driver) answers a ping, p exits, ctx ends or timeout passes.
func waitSQL(ctx context.Context, driver, dsn string, p *proc, timeout time.Duration) error {
	db, err := sql.Open(driver, dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	deadline := time.Now().Add(timeout)
	for {
		if p != nil && p.exited() {
			return fmt.Errorf("exited during start: %v", p.err)
		}
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err = db.PingContext(pctx)
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not answering after %s: %w", timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Restart stops the server — SIGTERM (clean shutdown) and SIGKILL (crash) alternately — keeps it
// down for down, and starts it again on the same port and data. It returns which signal was used.
func (m *mariaDB) Restart(ctx context.Context, down time.Duration) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	how := "SIGTERM"
	if m.p != nil {
		if m.crash {
			how = "SIGKILL"
			m.p.kill()
		} else if err := m.p.stop(syscall.SIGTERM, mariadbStopGrace); err != nil && !isSignalExit(err) {
			// A clean shutdown exits 0; anything else is worth knowing but not fatal.
			how = "SIGTERM (" + err.Error() + ")"
		}
		m.procs.forget(m.p)
		m.p = nil
	}
	m.crash = !m.crash
	select {
	case <-time.After(down):
	case <-ctx.Done():
	}
	// Start even when ctx is done: the run's checker still needs the database.
	return how, m.startLocked(context.WithoutCancel(ctx))
}

// Addr implements dbServer.
func (m *mariaDB) Addr() string { return "127.0.0.1:" + strconv.Itoa(m.port) }

// Stop shuts the server down cleanly (bounded, then SIGKILL).
func (m *mariaDB) Stop() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.p != nil {
		_ = m.p.stop(syscall.SIGTERM, mariadbStopGrace)
		m.procs.forget(m.p)
		m.p = nil
	}
}

func isSignalExit(err error) bool {
	var ee *exec.ExitError
	return errors.As(err, &ee)
}

//go:build unix

package cluster

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	_ "github.com/go-sql-driver/mysql" // the "mysql" database/sql driver
)

// Bounds of a private mariadbd's lifecycle.
const (
	// DefaultMariaDBStartTimeout bounds one node's start, state transfer included.
	DefaultMariaDBStartTimeout = 2 * time.Minute
	installTimeout             = 2 * time.Minute
)

// MariaDBAvailable reports whether mariadbd and mariadb-install-db (or mysqld, mysql_install_db)
// are installed, and if not, why.
func MariaDBAvailable() error {
	if _, err := findBinary("mariadbd", "mysqld"); err != nil {
		return err
	}
	_, err := findBinary("mariadb-install-db", "mysql_install_db")
	return err
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
	return "", fmt.Errorf("cluster: none of %v found on PATH or in /usr/sbin", names)
}

// serverUser is the account mariadbd runs as: when this process is root, "mysql" (mariadbd refuses
// to run as root without --user=root, and a Galera joiner's rsync daemon, started as root, would
// drop to "nobody" and could not write the data directory); otherwise the current user (""). The
// node directories are handed to it.
type serverUser struct {
	name     string
	uid, gid int
}

func lookupServerUser(needNonRoot bool) (serverUser, error) {
	if os.Geteuid() != 0 {
		return serverUser{}, nil
	}
	u, err := user.Lookup("mysql")
	if err != nil {
		if needNonRoot {
			return serverUser{}, fmt.Errorf("cluster: running as root, a Galera node needs the mysql system user for its rsync state transfer: %w", err)
		}
		return serverUser{name: "root"}, nil
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return serverUser{name: "mysql", uid: uid, gid: gid}, nil
}

// own hands path (recursively) to the server's user when that is not the current user.
func (su serverUser) own(path string) error {
	if su.name == "" || su.name == "root" {
		return nil
	}
	return filepath.Walk(path, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, su.uid, su.gid)
	})
}

// MariaNode is one private mariadbd: a Galera node of a [Galera] cluster, or a standalone server
// started by [StartMariaDB]. It has its own directory (data, socket, pid file, logs) and loopback
// ports. Its methods are safe for concurrent use.
type MariaNode struct {
	index   int
	name    string
	dir     string
	data    string
	cnf     string
	port    int
	g       *Galera // nil for a standalone server
	su      serverUser
	bin     string
	timeout time.Duration

	mu      sync.Mutex
	p       *process
	crashed bool // killed: the next start recovers the position first
	runs    int
	rejoin  string // how the last restart rejoined: "IST" or "SST"
	logFrom int64  // error.log size before the last start
}

// Port returns the node's SQL port on 127.0.0.1.
func (n *MariaNode) Port() int { return n.port }

// Index returns the node's position in its cluster (0 for a standalone server).
func (n *MariaNode) Index() int { return n.index }

// Name returns the node's name (wsrep_node_name).
func (n *MariaNode) Name() string { return n.name }

// DSN returns a go-sql-driver DSN for root on database db of the node (db may be empty), with
// short dial and I/O timeouts so that a killed node fails calls quickly.
func (n *MariaNode) DSN(db string) string {
	return fmt.Sprintf("root@tcp(127.0.0.1:%d)/%s?timeout=2s&readTimeout=10s&writeTimeout=10s", n.port, db)
}

// PID returns the process id of the running mariadbd, from its pid file (for CPU accounting).
func (n *MariaNode) PID() (int, error) {
	b, err := os.ReadFile(filepath.Join(n.dir, "mysqld.pid"))
	if err != nil {
		return 0, fmt.Errorf("cluster: %s: %w", n.name, err)
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// ErrorLog returns the path of the node's error log.
func (n *MariaNode) ErrorLog() string { return filepath.Join(n.dir, "error.log") }

// Running reports whether the node's process is running.
func (n *MariaNode) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.p != nil && !n.p.exited()
}

// Kill SIGKILLs the node (kill -9) and everything it started (state-transfer scripts). Killing a
// stopped node does nothing.
func (n *MariaNode) Kill() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.p == nil {
		return nil
	}
	err := n.p.kill()
	n.p, n.crashed = nil, true
	return err
}

// Rejoin says how the node's last restart caught up with its cluster: "IST" (incremental state
// transfer: the write sets it missed, from a peer's cache) or "SST" (a full copy of a peer's data
// directory); "" before any restart or for a standalone server.
func (n *MariaNode) Rejoin() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.rejoin
}

// writeConfig writes the node's option file; extra lines go at the end of [mysqld].
func (n *MariaNode) writeConfig(extra []string) error {
	lines := []string{
		"[mysqld]",
		"datadir=" + n.data,
		"tmpdir=" + n.tmpDir(),
		"socket=" + filepath.Join(n.dir, "mysqld.sock"),
		"pid-file=" + filepath.Join(n.dir, "mysqld.pid"),
		"port=" + strconv.Itoa(n.port),
		"bind-address=127.0.0.1",
		"skip-name-resolve",
		"log-error=" + n.ErrorLog(),
		"innodb-buffer-pool-size=64M",
		// Committed transactions reach the OS at each commit: a killed mariadbd loses none of them
		// (an OS crash could), and commits cost no fsync on a shared machine. In a Galera cluster
		// the other nodes hold every committed write set anyway.
		"innodb-flush-log-at-trx-commit=2",
		"innodb-lock-wait-timeout=5",
		"max-connections=400",
	}
	if n.su.name != "" {
		lines = append(lines, "user="+n.su.name)
	}
	lines = append(lines, extra...)
	if err := n.makeTmpDir(); err != nil {
		return err
	}
	return os.WriteFile(n.cnf, []byte(strings.Join(lines, "\n")+"\n"), 0o644)
}

// install creates the system tables in the node's empty data directory.
func (n *MariaNode) install(ctx context.Context) error {
	install, err := findBinary("mariadb-install-db", "mysql_install_db")
	if err != nil {
		return err
	}
	// The bootstrap's internal temporary tables go to the node's own directory, not the shared
	// /tmp: a mariadbd that starts deletes every "#sql…" file in its tmpdir, so a server another
	// test (re)started meanwhile once took one from under a bootstrap ("Could not remove temporary
	// table … error: 2", then "Unknown table 'mysql.tmp_user_sys'") and failed a CI run.
	if err := n.makeTmpDir(); err != nil {
		return err
	}
	args := []string{"--no-defaults", "--datadir=" + n.data, "--tmpdir=" + n.tmpDir(),
		"--auth-root-authentication-method=normal", "--skip-test-db"}
	if n.su.name != "" {
		args = append(args, "--user="+n.su.name)
	}
	var firstErr error
	for attempt := 0; ; attempt++ {
		ictx, cancel := context.WithTimeout(ctx, installTimeout)
		out, err := exec.CommandContext(ictx, install, args...).CombinedOutput()
		cancel()
		if err == nil {
			return n.su.own(n.data)
		}
		err = fmt.Errorf("cluster: %s: %w\n%s", filepath.Base(install), err, out)
		if attempt == 1 || ctx.Err() != nil {
			return errors.Join(firstErr, err)
		}
		// One more try on an emptied data directory: a half-written bootstrap cannot be resumed.
		firstErr = err
		if err := emptyDir(n.data); err != nil {
			return errors.Join(firstErr, err)
		}
	}
}

// tmpDir is the node's private directory for temporary files (mariadbd's tmpdir).
func (n *MariaNode) tmpDir() string { return filepath.Join(n.dir, "tmp") }

// makeTmpDir creates the node's tmpdir, owned by the server's user.
func (n *MariaNode) makeTmpDir() error {
	if err := os.MkdirAll(n.tmpDir(), 0o755); err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	if err := n.su.own(n.tmpDir()); err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	return nil
}

// emptyDir removes everything inside dir, keeping dir itself (and its owner).
func emptyDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return fmt.Errorf("cluster: %w", err)
		}
	}
	return nil
}

// recoverRe finds the position mariadbd --wsrep-recover prints.
var recoverRe = regexp.MustCompile(`Recovered position: ([0-9a-f-]{36}:-?[0-9]+)`)

// recoverPosition runs mariadbd --wsrep-recover on the node's data and returns the last committed
// Galera position (uuid:seqno), or "" when it has none.
func (n *MariaNode) recoverPosition(ctx context.Context) (string, error) {
	logPath := filepath.Join(n.dir, "recover.log")
	_ = os.Remove(logPath)
	rctx, cancel := context.WithTimeout(ctx, n.timeout)
	defer cancel()
	cmd := exec.CommandContext(rctx, n.bin, "--defaults-file="+n.cnf, "--wsrep-recover", "--log-error="+logPath)
	cmd.SysProcAttr = sysProcAttr()
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("cluster: %s --wsrep-recover: %w\n%s\n%s", n.name, err, out, tailFile(logPath, 2000))
	}
	b, _ := os.ReadFile(logPath)
	m := recoverRe.FindSubmatch(b)
	if m == nil || strings.HasSuffix(string(m[1]), ":-1") {
		return "", nil
	}
	return string(m[1]), nil
}

// start starts mariadbd with args after its option file and waits until it answers SQL and, for a
// Galera node, reports itself synced with its cluster.
func (n *MariaNode) start(ctx context.Context, args ...string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.p != nil && !n.p.exited() {
		return nil
	}
	if n.crashed && n.g != nil {
		pos, err := n.recoverPosition(ctx)
		if err != nil {
			return err
		}
		if pos != "" {
			args = append(args, "--wsrep-start-position="+pos)
		}
	}
	if fi, err := os.Stat(n.ErrorLog()); err == nil {
		n.logFrom = fi.Size()
	}
	out, err := os.OpenFile(filepath.Join(n.dir, "stdout.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	defer out.Close()
	p, err := startReaped("mariadbd "+n.name, n.bin, append([]string{"--defaults-file=" + n.cnf}, args...), os.Environ(), out)
	if err != nil {
		return err
	}
	n.p = p
	n.runs++
	sctx, cancel := context.WithTimeout(ctx, n.timeout)
	defer cancel()
	if err := n.waitReady(sctx, p); err != nil {
		_ = p.kill()
		n.p = nil
		return fmt.Errorf("cluster: %s on port %d: %w\n%s", n.name, n.port, err, tailFile(n.ErrorLog(), 4000))
	}
	if n.runs > 1 && n.g != nil {
		n.rejoin = n.rejoinKind()
	}
	n.crashed = false
	return nil
}

// rejoinKind reads the error log written since the last start: did the node receive an IST or a
// full SST?
func (n *MariaNode) rejoinKind() string {
	b, err := os.ReadFile(n.ErrorLog())
	if err != nil || int64(len(b)) < n.logFrom {
		return "unknown"
	}
	s := string(b[n.logFrom:])
	// The rsync script reports which it did ("rsync SST completed on joiner" for a full copy, "rsync
	// IST completed on joiner" when only the write sets were needed); mariadbd itself logs "SST
	// succeeded" in both cases.
	switch {
	case strings.Contains(s, "SST completed on joiner"):
		return "SST"
	case strings.Contains(s, "IST completed on joiner") || strings.Contains(s, "IST received"):
		return "IST"
	}
	return "unknown"
}

// waitReady polls the node until it answers SQL (and, in a cluster, is Synced), p exits or ctx ends.
func (n *MariaNode) waitReady(ctx context.Context, p *process) error {
	db, err := sql.Open("mysql", n.DSN(""))
	if err != nil {
		return err
	}
	defer db.Close()
	var last error
	for {
		if p.exited() {
			return fmt.Errorf("exited during start: %v", p.err)
		}
		if last = n.ready(ctx, db); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not ready: %w (%w)", last, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (n *MariaNode) ready(ctx context.Context, db *sql.DB) error {
	qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if n.g == nil {
		return db.PingContext(qctx)
	}
	st, err := wsrepStatus(qctx, db)
	if err != nil {
		return err
	}
	if st["wsrep_local_state_comment"] != "Synced" || st["wsrep_ready"] != "ON" {
		return fmt.Errorf("%w: wsrep state %q, ready %q", errNotReady, st["wsrep_local_state_comment"], st["wsrep_ready"])
	}
	return nil
}

// wsrepStatus returns the node's wsrep% status variables.
func wsrepStatus(ctx context.Context, db *sql.DB) (map[string]string, error) {
	rows, err := db.QueryContext(ctx, "SHOW GLOBAL STATUS LIKE 'wsrep%'")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	st := map[string]string{}
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			return nil, err
		}
		st[k] = v
	}
	return st, rows.Err()
}

// Status returns the node's wsrep% status variables (wsrep_local_cert_failures,
// wsrep_local_bf_aborts, wsrep_cluster_size, ...) over a fresh connection.
func (n *MariaNode) Status(ctx context.Context) (map[string]string, error) {
	db, err := sql.Open("mysql", n.DSN(""))
	if err != nil {
		return nil, err
	}
	defer db.Close()
	return wsrepStatus(ctx, db)
}

// StartMariaDB starts a standalone private mariadbd (no Galera) in a new temporary directory, on a
// free loopback port, with a fresh data directory from mariadb-install-db; root has no password.
// Stop it with [MariaNode.Stop], which removes the directory.
func StartMariaDB(ctx context.Context) (*MariaNode, error) {
	if err := MariaDBAvailable(); err != nil {
		return nil, err
	}
	bin, _ := findBinary("mariadbd", "mysqld")
	su, err := lookupServerUser(false)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "idemkit-mariadb-*")
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	n := &MariaNode{name: "mariadb", dir: dir, data: filepath.Join(dir, "data"), cnf: filepath.Join(dir, "my.cnf"),
		su: su, bin: bin, timeout: DefaultMariaDBStartTimeout}
	fail := func(err error) (*MariaNode, error) {
		n.Stop()
		return nil, err
	}
	if err := n.su.own(dir); err != nil {
		return fail(fmt.Errorf("cluster: %w", err))
	}
	if err := n.install(ctx); err != nil {
		return fail(err)
	}
	var lastErr error
	for range 3 { // the free port may be taken before mariadbd binds it
		ports, err := freePorts(1)
		if err != nil {
			return fail(err)
		}
		n.port = ports[0]
		if err := n.writeConfig([]string{"skip-log-bin"}); err != nil {
			return fail(fmt.Errorf("cluster: %w", err))
		}
		if lastErr = n.start(ctx); lastErr == nil {
			return n, nil
		}
	}
	return fail(lastErr)
}

// Stop kills a standalone server and removes its directory. For a Galera node use [Galera.Stop].
func (n *MariaNode) Stop() {
	_ = n.Kill()
	if n.g == nil && n.dir != "" {
		_ = os.RemoveAll(n.dir)
	}
}

// Restart starts a stopped node again on the same ports and data. A Galera node that was killed
// first recovers its last committed position (mariadbd --wsrep-recover) so that it can rejoin with
// an incremental state transfer; Restart waits until it is Synced. Restarting a running node does
// nothing.
func (n *MariaNode) Restart(ctx context.Context) error {
	return n.start(ctx)
}

// errNoGalera is returned when the Galera provider library is missing.
var errNoGalera = errors.New("cluster: the Galera provider (libgalera_smm.so, package galera-4) is not installed")

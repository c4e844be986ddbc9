//go:build unix

package chaos

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// Bounds of the private PostgreSQL's lifecycle.
const (
	postgresInitTimeout  = 2 * time.Minute
	postgresStartTimeout = time.Minute
	postgresStopGrace    = 30 * time.Second
)

// postgresServer is a private PostgreSQL: its own data directory (initdb), socket directory and
// loopback port, so the shared server other tests use is never touched. PostgreSQL refuses to run as
// root: when the harness is root, initdb and the server run as the system user "postgres". Its
// methods are safe for concurrent use.
type postgresServer struct {
	procs *procSet
	dir   string
	port  int
	bin   string
	args  []string
	cred  *syscall.Credential // nil: as this process's user

	mu    sync.Mutex
	p     *proc
	crash bool // the next restart uses SIGKILL instead of a fast shutdown
}

// postgresBinary returns the path of a PostgreSQL server program (initdb, postgres): on PATH, or in
// the newest /usr/lib/postgresql/<version>/bin (Debian keeps them there).
func postgresBinary(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int { return versionOf(b) - versionOf(a) })
	for _, d := range dirs {
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found on PATH or in /usr/lib/postgresql/*/bin", name)
}

// versionOf returns the major version in a path /usr/lib/postgresql/<version>/bin (0 if none).
func versionOf(dir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
	return v
}

// postgresUser returns the credential the server runs with: nil when this process is not root, the
// system user "postgres" when it is.
func postgresUser() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("PostgreSQL will not run as root and there is no user postgres: %w", err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("user postgres: uid %q, gid %q", u.Uid, u.Gid)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// PostgresAvailable reports whether the programs for a private PostgreSQL (initdb, postgres) are
// installed and can run here, and if not, why.
func PostgresAvailable() error {
	for _, n := range []string{"initdb", "postgres"} {
		if _, err := postgresBinary(n); err != nil {
			return err
		}
	}
	_, err := postgresUser()
	return err
}

// startPostgres initialises a fresh data directory under dir and starts PostgreSQL on a free
// loopback port; it waits (bounded) until the server answers.
func startPostgres(ctx context.Context, procs *procSet, dir string, logf func(string, ...any)) (*postgresServer, error) {
	initdb, err := postgresBinary("initdb")
	if err != nil {
		return nil, err
	}
	bin, err := postgresBinary("postgres")
	if err != nil {
		return nil, err
	}
	cred, err := postgresUser()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if cred != nil {
		// The server's user must own its directory and reach it through every parent.
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return nil, err
		}
		if err := traversable(filepath.Dir(dir)); err != nil {
			return nil, err
		}
	}
	data := filepath.Join(dir, "data")
	ictx, cancel := context.WithTimeout(ctx, postgresInitTimeout)
	defer cancel()
	logPath := filepath.Join(dir, "initdb.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ictx, initdb, "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = sysProcAttr()
	cmd.SysProcAttr.Credential = cred
	start := time.Now()
	err = cmd.Run()
	logFile.Close()
	if err != nil {
		return nil, fmt.Errorf("initdb: %w\n%s", err, tailFile(logPath, 2000))
	}
	logf("postgres: data directory initialised in %s", time.Since(start).Round(time.Millisecond))

	s := &postgresServer{procs: procs, dir: dir, bin: bin, cred: cred}
	var lastErr error
	for range 3 { // the free port may be taken before the server binds it
		if s.port, err = freePort(); err != nil {
			return nil, err
		}
		s.args = []string{"-D", data, "-p", strconv.Itoa(s.port), "-k", dir,
			"-c", "listen_addresses=127.0.0.1",
			// Commits reach the OS at every commit and are not fsynced: a killed server loses none
			// of them (only an OS crash could), and commits cost no fsync on this shared machine.
			"-c", "fsync=off",
			// A frozen worker's open transaction must not block the others for long.
			"-c", "lock_timeout=2s",
			"-c", "max_connections=400", "-c", "shared_buffers=64MB",
			"-c", "log_min_messages=warning", "-c", "logging_collector=off",
		}
		if lastErr = s.start(ctx); lastErr == nil {
			return s, nil
		}
	}
	return nil, lastErr
}

// traversable lets every user pass through dir and its parents (execute permission only), so that
// the server's user reaches its data directory inside a private temporary directory.
func traversable(dir string) error {
	for d := dir; ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return err
		}
		if fi.Mode().Perm()&0o001 == 0 {
			if err := os.Chmod(d, fi.Mode().Perm()|0o001); err != nil {
				return err
			}
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}

// DSN returns the pgx DSN of database db on the server (the postgres database when db is empty).
func (s *postgresServer) DSN(db string) string {
	if db == "" {
		db = "postgres"
	}
	return fmt.Sprintf("host=127.0.0.1 port=%d user=postgres dbname=%s sslmode=disable connect_timeout=2", s.port, db)
}

// Addr implements dbServer.
func (s *postgresServer) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

func (s *postgresServer) start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.startLocked(ctx)
}

func (s *postgresServer) startLocked(ctx context.Context) error {
	out, err := os.OpenFile(filepath.Join(s.dir, "server.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer out.Close()
	cmd := exec.Command(s.bin, s.args...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	p, err := s.procs.start("postgres", cmd)
	if err != nil {
		return err
	}
	s.p = p
	if err := waitSQL(ctx, "pgx", s.DSN(""), p, postgresStartTimeout); err != nil {
		p.kill()
		s.procs.forget(p)
		s.p = nil
		return fmt.Errorf("postgres on port %d: %w\n%s", s.port, err, tailFile(filepath.Join(s.dir, "server.log"), 3000))
	}
	return nil
}

// Restart implements dbServer: a fast shutdown (SIGINT: sessions are ended, the server exits
// cleanly) and SIGKILL of the server and its backends alternately.
func (s *postgresServer) Restart(ctx context.Context, down time.Duration) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	how := "SIGINT"
	if s.p != nil {
		if s.crash {
			how = "SIGKILL"
			s.p.kill()
		} else if err := s.p.stop(syscall.SIGINT, postgresStopGrace); err != nil && !isSignalExit(err) {
			how = "SIGINT (" + err.Error() + ")"
		}
		s.procs.forget(s.p)
		s.p = nil
	}
	s.crash = !s.crash
	select {
	case <-time.After(down):
	case <-ctx.Done():
	}
	// Start even when ctx is done: the run's checker still needs the database.
	return how, s.startLocked(context.WithoutCancel(ctx))
}

package dtmserver

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	_ "github.com/go-sql-driver/mysql" // the "mysql" database/sql driver
)

// MySQLStore is a MySQL or MariaDB database holding a server's global transactions (DTM's
// Store.Driver "mysql") instead of its boltdb file. Servers started on the same MySQLStore share
// every transaction: any of them answers for any gid, and each one's cron picks up the transactions
// another left unfinished — DTM in high availability. Create the tables first with
// [CreateMySQLStore].
type MySQLStore struct {
	// Host and Port of the server (required).
	Host string
	Port int
	// User (required) and Password.
	User     string
	Password string
	// DB is the database. Defaults to "dtm".
	DB string
	// MaxOpenConns bounds each DTM server's pool. Defaults to 50 (DTM's own default is 500, more than
	// a small test server accepts from two DTM servers).
	MaxOpenConns int
}

// env returns the settings DTM reads for the store (Store.Driver → STORE_DRIVER, ...).
func (m *MySQLStore) env() ([]string, error) {
	if m.Host == "" || m.Port <= 0 || m.User == "" {
		return nil, errors.New("dtmserver: MySQLStore needs Host, Port and User")
	}
	db := m.DB
	if db == "" {
		db = "dtm"
	}
	conns := m.MaxOpenConns
	if conns <= 0 {
		conns = 50
	}
	return []string{
		"STORE_DRIVER=mysql",
		"STORE_HOST=" + m.Host,
		"STORE_PORT=" + strconv.Itoa(m.Port),
		"STORE_USER=" + m.User,
		"STORE_PASSWORD=" + m.Password,
		"STORE_DB=" + db,
		"STORE_MAX_OPEN_CONNS=" + strconv.Itoa(conns),
		"STORE_MAX_IDLE_CONNS=" + strconv.Itoa(min(conns, 10)),
	}, nil
}

// storageSQL is DTM's own schema file for a MySQL store, in the pinned module.
const storageSQL = "sqls/dtmsvr.storage.mysql.sql"

// dbName matches the database name DTM's schema file hard-codes.
var dbName = regexp.MustCompile("\\bdtm\\b")

// CreateMySQLStore creates database db (when missing) and DTM's tables in it (those missing) on the
// MySQL/MariaDB server at dsn (a go-sql-driver DSN without a database, e.g. "root@tcp(127.0.0.1:3306)/"),
// from DTM's own schema file of the pinned version (sqls/dtmsvr.storage.mysql.sql, read from the Go
// module cache through the build module; the file's DROP TABLE statements are skipped, so existing
// tables and their transactions are kept). db defaults to "dtm".
func CreateMySQLStore(ctx context.Context, dsn, db string) error {
	if db == "" {
		db = "dtm"
	}
	if !regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`).MatchString(db) {
		return fmt.Errorf("dtmserver: invalid database name %q", db)
	}
	schema, err := StorageSchema(ctx)
	if err != nil {
		return err
	}
	conn, err := sql.Open("mysql", dsn)
	if err != nil {
		return fmt.Errorf("dtmserver: %w", err)
	}
	defer conn.Close()
	for stmt := range strings.SplitSeq(schema, ";") {
		stmt = strings.TrimSpace(stmt)
		if stmt == "" || strings.HasPrefix(strings.ToLower(stmt), "drop ") {
			continue
		}
		stmt = dbName.ReplaceAllString(stmt, db)
		if _, err := conn.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("dtmserver: creating the DTM store: %w\n%s", err, stmt)
		}
	}
	return nil
}

// StorageSchema returns DTM's MySQL schema file (sqls/dtmsvr.storage.mysql.sql) of the version the
// build module pins, located with `go mod download -json` in that module (which downloads it when
// the module cache lacks it).
func StorageSchema(ctx context.Context) (string, error) {
	modDir, err := BuildModuleDir()
	if err != nil {
		return "", err
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("dtmserver: the go command is needed to find DTM's schema: %w", err)
	}
	cmd := exec.CommandContext(ctx, goTool, "mod", "download", "-json", dtmPackage+"@"+Version)
	cmd.Dir = modDir
	cmd.Env = append(os.Environ(), "GOWORK=off")
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			err = fmt.Errorf("%w: %s", err, ee.Stderr)
		}
		return "", fmt.Errorf("dtmserver: locating %s@%s: %w", dtmPackage, Version, err)
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
		return "", fmt.Errorf("dtmserver: go mod download answered %q: %v", out, err)
	}
	b, err := os.ReadFile(filepath.Join(mod.Dir, filepath.FromSlash(storageSQL)))
	if err != nil {
		return "", fmt.Errorf("dtmserver: %w", err)
	}
	return string(b), nil
}

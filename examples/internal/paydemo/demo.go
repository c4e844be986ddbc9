package paydemo

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"time"

	mysqldrv "github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"
	"gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/netaddr"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/msgx"
	"github.com/idemkit/idemkit/record"
)

// Config is the part of an example's configuration that is not about its broker.
type Config struct {
	MySQL   string // DSN of an existing MariaDB/MySQL database
	Redis   string // Redis for the lock in front of the records; "" for none
	N       int    // payments to publish
	Workers int    // messages handled at once
	Keep    bool   // keep what the run created instead of removing it at the end
}

// RegisterFlags defines the flags -mysql, -redis, -n, -workers and -keep on fs, with the examples'
// defaults, storing their values in c. keepUsage is the usage of -keep, which names what the
// example's broker side keeps besides the tables.
func (c *Config) RegisterFlags(fs *flag.FlagSet, keepUsage string) {
	fs.StringVar(&c.MySQL, "mysql", "root:@tcp(127.0.0.1:3306)/idemkit_test", "MariaDB/MySQL DSN of an existing database")
	fs.StringVar(&c.Redis, "redis", "127.0.0.1:6379", `Redis for the lock in front of the records ("" for none)`)
	fs.IntVar(&c.N, "n", 60, "payments to publish")
	fs.IntVar(&c.Workers, "workers", 4, "messages handled at once")
	fs.BoolVar(&c.Keep, "keep", false, keepUsage)
}

// Parse parses args, a command line without the program's name, with fs, whose flags include c's
// ([Config.RegisterFlags]) and whose errors and usage go to fs.Output(), and checks what c received:
// no argument may follow the flags, -n and -workers must be at least 1, -redis, when set, must be
// host:port with a usable port and -mysql a DSN the driver parses. usage heads the flags' list that
// -h and every refusal print. Parse returns flag.ErrHelp after -h (exit 0), and any other error for a
// command line it refused (exit 2), having printed the error and the usage.
func (c *Config) Parse(fs *flag.FlagSet, args []string, usage string) error {
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err // printed by fs, with the usage
	}
	var err error
	switch {
	case fs.NArg() > 0:
		err = fmt.Errorf("unexpected argument %q", fs.Arg(0))
	case c.N < 1:
		err = fmt.Errorf("-n %d: the run publishes at least one payment", c.N)
	case c.Workers < 1:
		err = fmt.Errorf("-workers %d: at least one worker handles the messages", c.Workers)
	case c.Redis != "" && !netaddr.HostPort(c.Redis):
		// A malformed address would not fail the run: the Guard fails open, and runs without a lock.
		err = fmt.Errorf("-redis %q: want host:port, or \"\" for no Redis", c.Redis)
	}
	if err == nil {
		// A DSN the driver cannot parse is a bad value, not a failed run.
		if _, perr := mysqldrv.ParseDSN(c.MySQL); perr != nil {
			err = fmt.Errorf("-mysql: %w", perr)
		}
	}
	if err != nil {
		fmt.Fprintf(fs.Output(), "%v\n\n", err)
		fs.Usage()
	}
	return err
}

// errInvalidAmount rejects a payment whose amount is not positive.
var errInvalidAmount = errors.New("invalid amount")

// Demo is one run of the business: the record table, the accounts and the ledger of applied payments
// in MariaDB, the idemkit Guard (with a Redis lock in front when Config.Redis is set) and the msgx
// handler that applies payments. [Open] creates it; [Demo.Close] removes what it created.
type Demo struct {
	// Run is the run's unique name, "<prefix>_<8 hex digits>". The run's tables and Redis keys start
	// with it, and so should the broker objects the example creates.
	Run string

	db               *gorm.DB
	guard            *idemkit.Guard
	handle           msgx.HandleFunc
	accounts, ledger string
	cleanup          []func(ctx context.Context) // run in reverse by Close
}

// Open connects to MariaDB (and Redis, when c.Redis is set) and creates the run's tables: the record
// table, three accounts with a balance of 0 and an empty ledger. prefix starts [Demo.Run]. On error,
// Open closes what it opened and, unless c.Keep, drops the tables again. It refuses a c.N below 1.
func Open(ctx context.Context, prefix string, c Config) (_ *Demo, err error) {
	if c.N < 1 {
		// With no payment the check has nothing to check, and a negative count it reports as lost.
		return nil, fmt.Errorf("-n %d: the run publishes at least one payment", c.N)
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	run := prefix + "_" + hex.EncodeToString(b[:])
	d := &Demo{Run: run, accounts: run + "_accounts", ledger: run + "_ledger"}
	defer func() {
		if err != nil {
			d.Close(ctx)
		}
	}()

	// The database: records, accounts and a ledger of applied payments.
	d.db, err = gorm.Open(mysql.Open(c.MySQL), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		return nil, fmt.Errorf("open MariaDB: %w", err)
	}
	sqlDB, err := d.db.DB()
	if err != nil {
		return nil, fmt.Errorf("open MariaDB: %w", err)
	}
	d.onClose(func(context.Context) { _ = sqlDB.Close() })
	records, err := record.New(d.db, &record.Options{Table: run + "_records"})
	if err != nil {
		return nil, fmt.Errorf("record store: %w", err)
	}
	if !c.Keep { // IF EXISTS: also after a failure halfway through
		d.onClose(func(ctx context.Context) {
			d.db.WithContext(ctx).Exec("DROP TABLE IF EXISTS " + d.accounts + ", " + d.ledger + ", " + run + "_records")
		})
	}
	if err := records.CreateTable(ctx); err != nil {
		return nil, fmt.Errorf("create the record table: %w", err)
	}
	for _, ddl := range []string{
		"CREATE TABLE " + d.accounts + " (id INT PRIMARY KEY, balance BIGINT NOT NULL)",
		"CREATE TABLE " + d.ledger + " (payment_id VARCHAR(64) NOT NULL, account INT NOT NULL, amount BIGINT NOT NULL)",
		"INSERT INTO " + d.accounts + " (id, balance) VALUES (1, 0), (2, 0), (3, 0)",
	} {
		if err := d.db.WithContext(ctx).Exec(ddl).Error; err != nil {
			return nil, fmt.Errorf("create the accounts and the ledger: %w", err)
		}
	}

	// The guard: records in MariaDB, a Redis lock in front (optional).
	var gopts idemkit.Options
	if c.Redis != "" {
		rdb := redis.NewClient(&redis.Options{Addr: c.Redis, ContextTimeoutEnabled: true})
		d.onClose(func(context.Context) { _ = rdb.Close() })
		if !c.Keep { // the lock and the cached results of the run's keys
			d.onClose(func(ctx context.Context) {
				iter := rdb.Scan(ctx, 0, run+":*", 1000).Iterator()
				for iter.Next(ctx) {
					rdb.Del(ctx, iter.Val())
				}
			})
		}
		gopts.Locker = lock.New(rdb, &lock.Options{Prefix: run + ":"})
		gopts.FailOpen = true
	}
	if d.guard, err = idemkit.New(records, &gopts); err != nil {
		return nil, fmt.Errorf("idemkit guard: %w", err)
	}
	mg, err := msgx.New(d.guard, &msgx.Options{RetryDelay: 200 * time.Millisecond})
	if err != nil {
		return nil, fmt.Errorf("msgx guard: %w", err)
	}
	d.handle = mg.Tx(d.db, records, d.apply)
	return d, nil
}

// onClose adds f to what Close runs.
func (d *Demo) onClose(f func(ctx context.Context)) { d.cleanup = append(d.cleanup, f) }

// Close removes the run's tables and Redis keys, unless Config.Keep, and closes the connections. It
// runs to the end even when ctx is cancelled, so that an interrupted run cleans up too. Errors are
// ignored: the cleanup is best effort.
func (d *Demo) Close(ctx context.Context) {
	ctx = context.WithoutCancel(ctx)
	for i := len(d.cleanup) - 1; i >= 0; i-- {
		d.cleanup[i](ctx)
	}
	d.cleanup = nil
}

// Handle is the handler to give the broker adapter: it applies one payment message in Tx mode, so
// that the credit, the ledger row and the message's record commit together, and says what to tell
// the broker. A body that is not a payment, or a payment whose amount is not positive, is rejected
// (REJECTED, dead-lettered). It is safe for concurrent use.
func (d *Demo) Handle(ctx context.Context, m *msgx.Message) msgx.Decision {
	return d.handle(ctx, m)
}

// apply credits the payment's account and writes its ledger row, in the transaction msgx gives it.
func (d *Demo) apply(ctx context.Context, tx *gorm.DB, m *msgx.Message) error {
	var p payment
	if err := json.Unmarshal(m.Data, &p); err != nil {
		return idemkit.Permanent(err)
	}
	if p.Amount <= 0 {
		return idemkit.Permanent(errInvalidAmount)
	}
	if err := tx.Exec("UPDATE "+d.accounts+" SET balance = balance + ? WHERE id = ?", p.Amount, p.Account).Error; err != nil {
		return err
	}
	return tx.Exec("INSERT INTO "+d.ledger+" (payment_id, account, amount) VALUES (?, ?, ?)", m.ID, p.Account, p.Amount).Error
}

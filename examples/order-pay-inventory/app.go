package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/admin"
	"github.com/idemkit/idemkit/barrier"
	"github.com/idemkit/idemkit/hooks"
	"github.com/idemkit/idemkit/httpx"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/memory"
	"github.com/idemkit/idemkit/record"
	"github.com/idemkit/idemkit/saga"
	"github.com/idemkit/idemkit/sweep"
	"github.com/idemkit/idemkit/tcc"
)

// barrierRetention is how long barrier rows are kept: longer than any global transaction may take.
const barrierRetention = 7 * 24 * time.Hour

// RunOptions are the parts of a run that are not configuration: where output goes and the hooks the
// tour and the tests use. The zero value works.
type RunOptions struct {
	// Logger receives the services' logs. Defaults to a text logger on stderr at Config.LogLevel.
	Logger *slog.Logger
	// BuildProgress receives the DTM server's build progress. Defaults to stderr.
	BuildProgress io.Writer
	// Wrap, when set, wraps the services' handler (the tour slows a service down with it).
	Wrap func(http.Handler) http.Handler
	// OnBranch, when set, is called after every branch call is answered. It must be safe for
	// concurrent use.
	OnBranch func(BranchEvent)
}

// Services are the order, payment and inventory services running on one listener, with their
// database, lock and cache, DTM server and sweeper.
type Services struct {
	// URL is the base URL the services listen on (http://host:port).
	URL string
	// Cfg is the configuration in effect, defaults filled in.
	Cfg Config

	db      *database
	rdb     *redis.Client
	dtm     *dtm
	sweeper *sweep.Sweeper
	server  *http.Server
	serveCh chan error    // the HTTP server's end, or the DTM child process's
	closing chan struct{} // closed by Close: the DTM child's exit is then no failure
	closed  sync.Once
	gate    orderGate // order requests in flight, drained by Close
	orders  *orders
	inv     *inventory
	pay     *payment
	store   *record.Store
	metrics *metrics
	stats   reconcileStats
}

// reconcileStats counts what the reconciler did. It is safe for concurrent use.
type reconcileStats struct {
	settled, fenced, errors atomic.Int64
}

func (c *reconcileStats) observe(_ context.Context, e *hooks.ReconcileEvent) {
	if e.Settled {
		c.settled.Add(1)
	}
	if e.Fenced {
		c.fenced.Add(1)
	}
	if e.Err != nil {
		c.errors.Add(1)
	}
}

// health is the body of GET /healthz: the status and the counters an operator alerts on.
type health struct {
	Status     string `json:"status"`
	Reconciler struct {
		Settled int64 `json:"settled"`
		// Fenced counts transactions DTM had no record of: their initiator died before DTM heard of
		// them, or DTM lost them (a DTM store that does not survive a restart).
		Fenced int64 `json:"fenced"`
		Errors int64 `json:"errors"`
	} `json:"reconciler"`
	// UnreadableResults counts retries whose order could not be found (answered 500).
	UnreadableResults int64 `json:"unreadable_results"`
}

func (s *Services) health() health {
	h := health{Status: "ok", UnreadableResults: s.orders.unreadable.Load()}
	h.Reconciler.Settled = s.stats.settled.Load()
	h.Reconciler.Fenced = s.stats.fenced.Load()
	h.Reconciler.Errors = s.stats.errors.Load()
	return h
}

// Start opens the database and Redis (waiting up to Config.StartupTimeout for them), creates the
// tables, starts (or connects to) the DTM server, the sweeper and the HTTP server, and returns once the
// services accept requests. Stop them with [Services.Close]. On error nothing is left running.
func Start(ctx context.Context, cfg Config, ro RunOptions) (_ *Services, err error) {
	cfg, err = cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	logger := ro.Logger
	if logger == nil {
		logger = newLogger(cfg.LogLevel)
	}
	if ro.BuildProgress == nil {
		ro.BuildProgress = os.Stderr
	}
	s := &Services{}
	defer func() {
		if err != nil {
			_ = s.Close()
		}
	}()

	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", cfg.Listen, err)
	}
	s.server = &http.Server{ReadHeaderTimeout: 10 * time.Second}
	s.URL = localURL(ln.Addr())
	if cfg.PublicURL == "" {
		cfg.PublicURL = s.URL
	}
	s.Cfg = cfg
	s.serveCh = make(chan error, 2) // room for both senders: Serve's goroutine and watchDTM's
	s.closing = make(chan struct{})
	pending := ln // closed on error, until Serve owns it
	defer func() {
		if pending != nil {
			_ = pending.Close()
		}
	}()

	if s.db, err = openDatabase(ctx, &cfg); err != nil {
		return nil, err
	}
	if err := s.db.createTables(ctx); err != nil {
		return nil, err
	}
	if s.store, err = record.New(s.db.db, &record.Options{Table: s.db.tables.records}); err != nil {
		return nil, err
	}
	if err := s.store.CreateTable(ctx); err != nil {
		return nil, err
	}
	// Metrics (GET /metrics): the Guards' calls, the sweeper's work, the table's PROCESSING claims.
	adm, err := admin.New(s.db.db, &admin.Options{Table: s.db.tables.records})
	if err != nil {
		return nil, err
	}
	if s.metrics, err = newMetrics(adm.Claims); err != nil {
		return nil, err
	}
	bar, err := barrier.NewGorm(s.db.db, &barrier.GormOptions{Table: s.db.tables.barrier})
	if err != nil {
		return nil, err
	}
	if err := bar.CreateTable(ctx); err != nil {
		return nil, err
	}

	// The lock and result cache in front of the records: Redis when configured (fail-open: the
	// database alone still keeps every guarantee), else in-process.
	var locker idemkit.Locker = memory.NewLocker(nil)
	failOpen := false
	if cfg.Redis != "" {
		if s.rdb, err = openRedis(ctx, &cfg); err != nil {
			return nil, err
		}
		locker, failOpen = lock.New(s.rdb, &lock.Options{Prefix: cfg.RedisPrefix}), true
	}

	if s.dtm, err = startDTM(ctx, &cfg, ro.BuildProgress); err != nil {
		return nil, err
	}

	// Two Guards on one record table. httpGuard keeps the HTTP responses (the middleware's records);
	// its lease outlasts the longest order request. txGuard keeps the initiators' records, tied to
	// each global transaction's gid; its lease is how long an outcome may stay unknown before the
	// reconciler asks DTM.
	httpGuard, err := idemkit.New(s.store, &idemkit.Options{
		Locker: locker, FailOpen: failOpen, Lease: cfg.Wait + 15*time.Second, Logger: logger, Observer: s.metrics.observer,
	})
	if err != nil {
		return nil, err
	}
	txGuard, err := idemkit.New(s.store, &idemkit.Options{
		Locker: locker, FailOpen: failOpen, Lease: cfg.ReconcileAfter, Logger: logger, Observer: s.metrics.observer,
	})
	if err != nil {
		return nil, err
	}

	status := newStatusClient(s.dtm.url)
	s.inv = &inventory{db: s.db, table: s.db.tables.inventory}
	s.pay = &payment{db: s.db, table: s.db.tables.accounts}
	s.orders = &orders{db: s.db, table: s.db.tables.orders, publicURL: cfg.PublicURL, cfg: &s.Cfg, logger: logger, now: time.Now}
	lc := s.orders.lifecycle(txGuard)
	s.orders.sagas = &saga.Initiator{Server: s.dtm.url, Lifecycle: lc, Wait: cfg.Wait, Status: status}
	s.orders.tccs = &tcc.Global{Server: s.dtm.url, Lifecycle: lc, Wait: cfg.Wait, Status: status}

	// The reconciler settles only the orders' records (their scopes), asking this DTM. A gid DTM does
	// not know is fenced, logged at error level and counted (GET /healthz, and
	// idemkit_reconcile_fenced_total on /metrics): the order's initiator died before DTM heard of it,
	// or DTM lost it.
	reconciler := &hooks.Reconciler{
		Lifecycle: lc, Scopes: []string{scopeSaga, scopeTCC}, Manager: status, Logger: logger,
		Observe: func(ctx context.Context, e *hooks.ReconcileEvent) {
			s.stats.observe(ctx, e)
			s.metrics.observer.Reconciled(ctx, e)
		},
	}
	// The orphan task settles the orders no record follows any more: see orders.orphanTask. The
	// recovery of a stale claim also releases the lock its dead holder still holds (by its token), so
	// the key's retry is not answered in flight until that lock expires.
	tasks := append(sweep.RecordTasksWithLocker(s.store, locker), reconciler.Task(), s.orders.orphanTask(status, cfg.ReconcileAfter), sweep.Task{
		Name: "barrier",
		Run: func(ctx context.Context, now time.Time, limit int) (int, error) {
			return bar.DeleteOlder(ctx, now.Add(-barrierRetention), limit)
		},
	})
	if s.sweeper, err = sweep.New(&sweep.Options{
		Interval: cfg.SweepInterval, Locker: locker, LockKey: "order-pay-inventory-sweep", Logger: logger,
	}, s.metrics.observer.Tasks(tasks...)...); err != nil {
		return nil, err
	}

	r := chi.NewRouter()
	// The middleware reads no more of a body than the handlers do: a larger one is 413 for every key
	// before anything is stored, not a stored 400 from the handler.
	idem := httpx.Middleware(httpGuard, &httpx.Options{Logger: logger, MaxBodyBytes: maxBody})
	r.With(s.gate.admit, asJSON, idem).Post("/api/orders", s.orders.handleCreate(false))
	r.With(s.gate.admit, asJSON, idem).Post("/api/orders/tcc", s.orders.handleCreate(true))
	r.Get("/api/orders/{order_id}", s.orders.handleGet)
	r.Get("/api/accounts/{user_id}", s.pay.handleGet)
	r.Put("/api/accounts/{user_id}", s.pay.handlePut)
	r.Get("/api/inventory/{sku}", s.inv.handleGet)
	r.Put("/api/inventory/{sku}", s.inv.handlePut)
	r.Handle("/metrics", s.metrics.handler)
	r.Get("/healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, s.health())
	})
	routeErrors(r)
	err = mountBranches(r, &branchDeps{
		bar: bar, locker: locker, failOpen: failOpen, logger: logger, onBranch: ro.OnBranch, inv: s.inv, pay: s.pay,
	})
	if err != nil {
		return nil, err
	}
	var h http.Handler = r
	if ro.Wrap != nil {
		h = ro.Wrap(h)
	}
	s.server.Handler = h

	s.sweeper.Start(context.WithoutCancel(ctx))
	pending = nil
	go func() { s.serveCh <- s.server.Serve(ln) }()
	if s.dtm.child != nil {
		go s.watchDTM()
	}
	logger.Info("services started", "url", s.URL, "public_url", cfg.PublicURL, "database", s.db.where,
		"lock", s.lockDescription(), "dtm", s.dtm.describe())
	return s, nil
}

// localURL is the URL of a listener's address, on the loopback address when it listens on all
// interfaces.
func localURL(a net.Addr) string {
	if ta, ok := a.(*net.TCPAddr); ok && ta.IP.IsUnspecified() {
		return "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(ta.Port))
	}
	return "http://" + a.String()
}

// lockDescription says where the lock and cache live.
func (s *Services) lockDescription() string {
	if s.rdb != nil {
		return "Redis " + s.Cfg.Redis
	}
	return "in-process (memory)"
}

// DTMLog returns the end of the DTM child process's log ("" for an external server).
func (s *Services) DTMLog() string {
	if s.dtm == nil {
		return ""
	}
	return s.dtm.log()
}

// Done delivers the HTTP server's error if it stops serving before Close, or an error naming the DTM
// child process if it exits before Close: without it no order can start or settle, and restarting the
// services on the same data directory resumes its transactions.
func (s *Services) Done() <-chan error { return s.serveCh }

// watchDTM reports on serveCh a DTM child process that exits before Close.
func (s *Services) watchDTM() {
	child := s.dtm.child
	select {
	case <-s.closing:
	case <-child.Done():
		select {
		case <-s.closing: // Close stopped it
		default:
			s.serveCh <- fmt.Errorf("the DTM child process exited (%v): no order can start or settle without it; "+
				"restart the services on the same data directory (%s) to resume its transactions\n%s",
				child.ExitErr(), s.Cfg.DataDir, lastLines(s.dtm.log(), 20))
		}
	}
}

// Close stops the HTTP server, the sweeper and a DTM child process, and closes the database and Redis
// clients. It returns the errors met, joined. New order requests are answered 503 from then on; those
// in progress finish first, their branches still served (DTM calls them on the services' listener),
// and then the other requests in progress; all of it up to 10s.
func (s *Services) Close() error {
	if s.closing != nil {
		s.closed.Do(func() { close(s.closing) })
	}
	var errs []error
	if s.server != nil && s.server.Handler != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		select {
		case <-s.gate.drain():
		case <-ctx.Done():
		}
		if err := s.server.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("stopping the HTTP server: %w", err))
		}
		cancel()
	}
	if s.sweeper != nil {
		_ = s.sweeper.Close()
	}
	if s.metrics != nil {
		_ = s.metrics.close(context.Background())
	}
	if s.dtm != nil {
		if err := s.dtm.stop(); err != nil {
			errs = append(errs, err)
		}
	}
	if s.rdb != nil {
		_ = s.rdb.Close()
	}
	if s.db != nil {
		if err := s.db.close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// openRedis connects to cfg.Redis (host:port or a redis:// URL) and waits for it to answer.
func openRedis(ctx context.Context, cfg *Config) (*redis.Client, error) {
	opts, err := redisOptions(cfg.Redis)
	if err != nil {
		return nil, err
	}
	rdb := redis.NewClient(opts)
	if err := waitUp(ctx, cfg.StartupTimeout, "Redis "+opts.Addr, func(ctx context.Context) error { return rdb.Ping(ctx).Err() }); err != nil {
		_ = rdb.Close()
		return nil, err
	}
	return rdb, nil
}

// redisOptions are the client options for addr (host:port or a redis:// URL). The Guards fail open
// (FailOpen): a Redis that is down is skipped for the database, and go-redis's defaults — a refused
// connection dialled 5 times, each command retried 3 times, with backoffs — would hold each call
// about 1.7 s before it does (README, "Guarantees and their limits"): one dial, no retry.
func redisOptions(addr string) (*redis.Options, error) {
	opts := &redis.Options{Addr: addr}
	if strings.Contains(addr, "://") {
		var err error
		if opts, err = redis.ParseURL(addr); err != nil {
			return nil, fmt.Errorf("redis: %w", err)
		}
	}
	opts.ContextTimeoutEnabled = true
	opts.DialTimeout = 3 * time.Second
	opts.MaxRetries, opts.DialerRetries = -1, 1
	return opts, nil
}

// newLogger returns a text logger on stderr at level.
func newLogger(level string) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level))
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l}))
}

//go:build unix

package chaos

// The DTM scenario: the runnable example (examples/order-pay-inventory) in serve mode is the system
// under test — an order service that starts a saga or a TCC per order through idemkit's initiators,
// and the payment and inventory branches behind the barrier — driven by concurrent duplicate storms
// while it is SIGKILLed and restarted on its data, then every key is retried until answered and an
// independent checker reads the tables. See RunDTM.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/idemkit/idemkit/internal/dtmserver"
)

// DTMMode is where the scenario's DTM server and stores live.
type DTMMode string

// The modes of [RunDTM].
const (
	// DTMExternal runs the order service on a private MariaDB and a private Redis, with a DTM server
	// the harness runs (never killed): only the initiating service dies.
	DTMExternal DTMMode = "external"
	// DTMEmbedded runs the order service on its embedded defaults: SQLite, an in-process lock and a
	// DTM child process with its store in the service's data directory — killed with it and
	// restarted with it on the same data.
	DTMEmbedded DTMMode = "embedded"
)

// Defaults of [DTMConfig].
const (
	DefaultDTMDuration  = 20 * time.Second
	DefaultDTMClients   = 6
	DefaultDTMDup       = 3
	DefaultKillEvery    = 5 * time.Second
	DefaultDTMWait      = 2 * time.Second
	DefaultDTMSettleFor = 3 * time.Minute
)

// DTMConfig configures [RunDTM]. The zero value works: the external mode for 20s.
type DTMConfig struct {
	// Mode is DTMExternal (the default) or DTMEmbedded.
	Mode DTMMode
	// Duration of the storm; the service is killed during all of it. Defaults to DefaultDTMDuration.
	Duration time.Duration
	// MinKills makes the storm go on past Duration until the service was killed that many times
	// (restarts on a loaded machine can eat the time between kills). Defaults to 0.
	MinKills int
	// Clients is the number of concurrent clients. Defaults to DefaultDTMClients.
	Clients int
	// Dup is how many identical requests each new key gets at once. Defaults to DefaultDTMDup.
	Dup int
	// KillEvery is the mean time between two SIGKILLs of the service (jittered ±50%). Defaults to
	// DefaultKillEvery.
	KillEvery time.Duration
	// Wait is the service's -wait (how long an order request waits for the outcome). Defaults to
	// DefaultDTMWait.
	Wait time.Duration
	// SettleFor bounds the phase that retries every key until it is answered. Defaults to
	// DefaultDTMSettleFor.
	SettleFor time.Duration
	// Seed seeds the orders and the kill schedule. Defaults to the clock.
	Seed int64
	// Dir holds the run's data and logs. Defaults to a temporary directory, removed unless KeepDir is
	// set or the run found violations.
	Dir     string
	KeepDir bool
	// Logf receives progress lines. Defaults to discarding.
	Logf func(format string, args ...any)
	// ServiceBinary is the example's executable. Defaults to one built (go build) from this
	// repository's examples/order-pay-inventory into Dir.
	ServiceBinary string
}

func (c *DTMConfig) withDefaults() (DTMConfig, error) {
	var o DTMConfig
	if c != nil {
		o = *c
	}
	o.Mode = cmp.Or(o.Mode, DTMExternal)
	o.Duration = cmp.Or(o.Duration, DefaultDTMDuration)
	o.Clients = cmp.Or(o.Clients, DefaultDTMClients)
	o.Dup = cmp.Or(o.Dup, DefaultDTMDup)
	o.KillEvery = cmp.Or(o.KillEvery, DefaultKillEvery)
	o.Wait = cmp.Or(o.Wait, DefaultDTMWait)
	o.SettleFor = cmp.Or(o.SettleFor, DefaultDTMSettleFor)
	if o.Seed == 0 {
		o.Seed = time.Now().UnixNano()
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	switch {
	case o.Mode != DTMExternal && o.Mode != DTMEmbedded:
		return o, fmt.Errorf("chaos: unknown DTM mode %q (want %s or %s)", o.Mode, DTMExternal, DTMEmbedded)
	case o.Duration < time.Second || o.KillEvery < 500*time.Millisecond || o.Wait < time.Millisecond:
		return o, errors.New("chaos: DTM Duration must be at least 1s, KillEvery 500ms, Wait 1ms")
	case o.Clients < 1 || o.Dup < 1:
		return o, errors.New("chaos: DTM Clients and Dup must be positive")
	}
	return o, nil
}

// ParseDTMModes parses "external", "embedded", "both" or a comma-separated list.
func ParseDTMModes(s string) ([]DTMMode, error) {
	if strings.TrimSpace(s) == "both" {
		return []DTMMode{DTMExternal, DTMEmbedded}, nil
	}
	var out []DTMMode
	for _, m := range strings.Split(s, ",") {
		switch mode := DTMMode(strings.TrimSpace(m)); mode {
		case DTMExternal, DTMEmbedded:
			out = append(out, mode)
		default:
			return nil, fmt.Errorf("chaos: unknown DTM mode %q (want external, embedded or both)", m)
		}
	}
	return out, nil
}

// RunDTM runs the DTM scenario once and returns its report.
//
// It builds the example (unless ServiceBinary is set) and starts it in serve mode — on a private
// MariaDB, a private Redis and a DTM server of its own (DTMExternal), or on its embedded defaults with
// the DTM child process storing in the data directory (DTMEmbedded). Clients then create orders: every
// new key gets Dup identical requests at once, on the saga and the TCC endpoint alternately, for users
// who can pay and users who cannot, on plentiful and scarce stock, and clients re-send earlier keys;
// meanwhile the service is SIGKILLed every KillEvery (±50%) and restarted on the same data and port.
// After the storm every key is retried until it is answered, the harness waits for no order to be
// PENDING and no record PROCESSING, stops everything and checks (see [DTMReport]).
//
// It returns an error when the harness could not run; violations are in the report. Every process it
// starts is stopped before it returns.
func RunDTM(ctx context.Context, cfg *DTMConfig) (rep *DTMReport, err error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	dir := c.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "idemchaos-dtm-"); err != nil {
			return nil, err
		}
		defer func() {
			if c.KeepDir || rep != nil && len(rep.Violations()) > 0 {
				c.Logf("run directory kept: %s", dir)
				return
			}
			_ = os.RemoveAll(dir)
		}()
	}
	started := time.Now()
	procs := newProcSet()
	defer procs.killAll()

	// The DTM server (external, or the example's embedded child) before the setup deadline starts: a
	// cold build takes minutes; later runs find it cached.
	c.Logf("dtm %s: the DTM server, built if needed (a cold build takes minutes)", c.Mode)
	if _, err := dtmserver.Build(ctx, nil); err != nil {
		return nil, fmt.Errorf("chaos: DTM server: %w", err)
	}
	sctx, cancel := context.WithTimeout(ctx, setupTimeout)
	defer cancel()
	bin := c.ServiceBinary
	if bin == "" {
		if bin, err = buildExample(sctx, dir); err != nil {
			return nil, err
		}
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	svc := &orderService{
		bin: bin, procs: procs, log: filepath.Join(dir, "service.log"),
		url: "http://127.0.0.1:" + strconv.Itoa(port),
		args: []string{"serve", "-listen", "127.0.0.1:" + strconv.Itoa(port), "-data-dir", filepath.Join(dir, "data"),
			"-wait", c.Wait.String(), "-reconcile-after", (2*c.Wait + 2*time.Second).String(), "-sweep-interval", "300ms",
			"-retry-interval", "1s", "-timeout-to-fail", "8s", "-log-level", "warn"},
	}
	var st tables
	switch c.Mode {
	case DTMExternal:
		maria, err := startMariaDB(sctx, procs, filepath.Join(dir, "mariadb"), c.Logf)
		if err != nil {
			return nil, fmt.Errorf("chaos: private MariaDB: %w", err)
		}
		rds, err := startRedis(sctx, procs, filepath.Join(dir, "redis"))
		if err != nil {
			return nil, fmt.Errorf("chaos: private Redis: %w", err)
		}
		if err := createDatabase(sctx, maria.DSN(""), "opi"); err != nil {
			return nil, err
		}
		dtmLog, err := os.Create(filepath.Join(dir, "dtm.log"))
		if err != nil {
			return nil, err
		}
		defer dtmLog.Close()
		dtm, err := dtmserver.Start(sctx, &dtmserver.Options{Dir: filepath.Join(dir, "dtm"), Log: dtmLog, Env: []string{"LOG_LEVEL=warn"}})
		if err != nil {
			return nil, fmt.Errorf("chaos: DTM server: %w", err)
		}
		defer dtm.Stop()
		svc.args = append(svc.args, "-db", "mysql://"+maria.DSN("opi"), "-redis", rds.addr, "-dtm", dtm.URL())
		st = tables{mysqlDSN: maria.DSN("opi")}
		c.Logf("external: mariadb on port %d, redis on %s, DTM %s", maria.port, rds.addr, dtm.URL())
	case DTMEmbedded:
		st = tables{sqlitePath: filepath.Join(dir, "data", "shop.db")}
	}
	if err := svc.start(sctx); err != nil {
		return nil, err
	}
	cancel()
	c.Logf("%s: order service up on %s after %s; storm for %s, a SIGKILL every ~%s",
		c.Mode, svc.url, time.Since(started).Round(time.Millisecond), c.Duration, c.KillEvery)

	rng := newLockedRand(c.Seed)
	lg := newOrderLoad(c, svc.url, rng)
	if err := lg.setupStock(ctx); err != nil {
		return nil, err
	}
	load, stopLoad := context.WithCancel(ctx) // the kill loop ends the storm
	defer stopLoad()
	var harnessErrs []string
	var kills, inFlight int
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); lg.storm(load) }()
	go func() {
		defer wg.Done()
		defer stopLoad()
		kills, inFlight, harnessErrs = killLoop(ctx, c, svc, st, rng)
	}()
	wg.Wait()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if err := svc.ensure(ctx); err != nil {
		harnessErrs = append(harnessErrs, "restarting the service after the storm: "+err.Error())
	}
	c.Logf("storm done: %d keys, %d requests, %d kills; retrying every key until answered", lg.keyCount(), lg.requestCount(), kills)
	unsettled := lg.settle(ctx, c.SettleFor)
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	quiet, qerr := st.quiesce(ctx, 90*time.Second)
	if qerr != nil {
		harnessErrs = append(harnessErrs, "waiting for the transactions to settle: "+qerr.Error())
	}
	if err := svc.stop(); err != nil {
		harnessErrs = append(harnessErrs, err.Error())
	}
	c.Logf("settled (%d keys unanswered, quiet after %s); checking", unsettled, quiet.Round(time.Millisecond))

	cctx, ccancel := context.WithTimeout(ctx, checkTimeout)
	defer ccancel()
	res, err := checkOrders(cctx, st, lg)
	if err != nil {
		return nil, fmt.Errorf("chaos: checker: %w", err)
	}
	logText, _ := os.ReadFile(svc.log)
	rep = &DTMReport{
		Mode: c.Mode, Seed: c.Seed, Duration: c.Duration, Clients: c.Clients, Dup: c.Dup, KillEvery: c.KillEvery,
		Requests: lg.requestCount(), Keys: lg.keyCount(), Answers: lg.answerClasses(),
		Kills: kills, KilledInFlight: inFlight, Starts: svc.startCount(), CutRequests: lg.cut.Load(), Unsettled: unsettled,
		Fenced:        strings.Count(string(logText), "had no record of a pending transaction"),
		Unreadable:    strings.Count(string(logText), "cannot tell which order"),
		Check:         res,
		HarnessErrors: harnessErrs,
	}
	rep.Duplicates = rep.Requests - rep.Keys
	rep.Elapsed = time.Since(started)
	return rep, nil
}

// killLoop SIGKILLs the service at jittered intervals for c.Duration, and past it until c.MinKills
// kills, restarting it each time after a short pause; the storm ends when it returns. It returns the
// number of kills, the orders that were PENDING (their global transaction in flight) a moment before
// each kill, summed, and the restarts that failed.
func killLoop(ctx context.Context, c DTMConfig, svc *orderService, st tables, rng *lockedRand) (kills, inFlight int, errs []string) {
	db, err := st.open()
	if err != nil {
		return 0, 0, []string{"opening the tables: " + err.Error()}
	}
	defer closeGorm(db)
	end := time.Now().Add(c.Duration)
	for {
		next := time.Now().Add(c.KillEvery/2 + time.Duration(rng.IntN(int(c.KillEvery))))
		if next.After(end) && kills >= c.MinKills {
			sleepCtx(ctx, time.Until(end))
			return kills, inFlight, errs
		}
		sleepCtx(ctx, time.Until(next))
		if ctx.Err() != nil {
			return kills, inFlight, errs
		}
		var pending int64
		if db.WithContext(ctx).Raw("SELECT COUNT(*) FROM orders WHERE status = 'PENDING'").Scan(&pending).Error == nil {
			inFlight += int(pending)
		}
		svc.kill()
		kills++
		sleepCtx(ctx, 200*time.Millisecond+time.Duration(rng.IntN(800))*time.Millisecond)
		if err := svc.start(context.WithoutCancel(ctx)); err != nil {
			errs = append(errs, fmt.Sprintf("restart after kill %d: %v", kills, err))
			return kills, inFlight, errs
		}
	}
}

// orderService is the example in serve mode, as a child process. Its methods are safe for
// concurrent use.
type orderService struct {
	bin  string
	args []string
	log  string
	url  string

	procs  *procSet
	mu     sync.Mutex
	p      *proc
	starts int
}

// start starts the service and waits until it answers GET /healthz (the first start may build the
// DTM server).
func (s *orderService) start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	out, err := os.OpenFile(s.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer out.Close()
	fmt.Fprintf(out, "\n===== start %d at %s\n", s.starts+1, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(s.bin, s.args...)
	cmd.Stdout, cmd.Stderr = out, out
	p, err := s.procs.start("order-service", cmd)
	if err != nil {
		return err
	}
	s.p = p
	s.starts++
	deadline := time.Now().Add(5 * time.Minute)
	client := &http.Client{Timeout: time.Second}
	for {
		resp, err := client.Get(s.url + "/healthz")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if p.exited() {
			return fmt.Errorf("the order service exited at start: %v\n%s", p.err, tailFile(s.log, 3000))
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			p.kill()
			return fmt.Errorf("the order service did not answer on %s: %v\n%s", s.url, err, tailFile(s.log, 3000))
		}
		sleepCtx(ctx, 100*time.Millisecond)
	}
}

// ensure starts the service if it is not running.
func (s *orderService) ensure(ctx context.Context) error {
	s.mu.Lock()
	running := s.p != nil && !s.p.exited()
	s.mu.Unlock()
	if running {
		return nil
	}
	return s.start(ctx)
}

// kill SIGKILLs the service (its DTM child process dies with it: parent-death signal).
func (s *orderService) kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.p != nil {
		s.p.kill()
		s.procs.forget(s.p)
	}
}

// stop stops the service gracefully (SIGINT), killing it after a grace period.
func (s *orderService) stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.p == nil || s.p.exited() {
		return nil
	}
	err := s.p.stop(syscall.SIGINT, 20*time.Second)
	s.procs.forget(s.p)
	if err != nil && !isSignalExit(err) {
		return fmt.Errorf("stopping the order service: %w", err)
	}
	return nil
}

func (s *orderService) startCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.starts
}

// buildExample builds examples/order-pay-inventory into dir and returns the binary's path.
func buildExample(ctx context.Context, dir string) (string, error) {
	mod, err := dtmserver.BuildModuleDir() // <root>/internal/dtmserver/build
	if err != nil {
		return "", fmt.Errorf("chaos: finding the repository: %w", err)
	}
	root := filepath.Clean(filepath.Join(mod, "..", "..", ".."))
	bin := filepath.Join(dir, "order-pay-inventory")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./examples/order-pay-inventory")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("chaos: building the example: %w\n%s", err, out)
	}
	return bin, nil
}

//go:build unix

package cluster

import (
	"cmp"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Defaults of [GaleraOptions].
const (
	DefaultGaleraNodes = 3
	// DefaultGaleraSuspectTimeout is evs.suspect_timeout: how long the group waits for a silent node
	// before it drops it from the view. Writes stall meanwhile (every node must receive each write
	// set). It is Galera's default, 5s, and evs.inactive_timeout is 3 times it (Galera's 15s): with
	// 3s and 6s, a survivor starved of CPU for a few seconds on a loaded test machine right after
	// a node was killed was suspected by the other, each was left alone without quorum and the
	// cluster lost its primary component (which WaitSynced now restores, but a fault test should
	// not need it).
	DefaultGaleraSuspectTimeout = 5 * time.Second
)

// galeraProviders are where distributions install the Galera 4 provider.
var galeraProviders = []string{"/usr/lib/galera/libgalera_smm.so", "/usr/lib64/galera-4/libgalera_smm.so",
	"/usr/lib/galera-4/libgalera_smm.so", "/usr/lib64/galera/libgalera_smm.so"}

// GaleraOptions configure [StartGalera]. The zero value works.
type GaleraOptions struct {
	// Nodes is the number of nodes. Defaults to DefaultGaleraNodes (3).
	Nodes int
	// Dir holds one directory per node. Defaults to a new temporary directory that Stop removes.
	// When running as root it must be traversable by the mysql user.
	Dir string
	// SuspectTimeout is evs.suspect_timeout; evs.inactive_timeout is 3 times it. Defaults to
	// DefaultGaleraSuspectTimeout.
	SuspectTimeout time.Duration
	// StartTimeout bounds each node's start, state transfer included. Defaults to
	// DefaultMariaDBStartTimeout (2m).
	StartTimeout time.Duration
	// Extra holds more option lines (name=value) for every node's [mysqld] section.
	Extra []string
	// Logf, when set, reports what the cluster does on its own: the primary component it restores
	// (see [Galera.WaitSynced]). [StartGaleraT] sets it to t.Logf.
	Logf func(format string, args ...any)
}

// Galera is a MariaDB Galera cluster of private mariadbd processes on this machine: each node has its
// own data directory, SQL port, group communication port (gmcast), IST port and SST port, all on
// 127.0.0.1. The first node bootstraps the cluster (--wsrep-new-cluster) from a fresh
// mariadb-install-db; the others join it empty and receive a full state transfer (rsync SST). Its
// methods are safe for concurrent use.
type Galera struct {
	o      GaleraOptions
	dir    string
	ownDir bool
	name   string
	nodes  []*MariaNode

	mu        sync.Mutex // serialises restorePrimary
	restored  []string   // what restorePrimary did
	lostSince time.Time  // since when restorePrimary has seen no primary component, zero if it has
}

// GaleraAvailable reports whether mariadbd, mariadb-install-db, the Galera provider and rsync (the
// state transfer method) are installed, and if not, why.
func GaleraAvailable() error {
	if err := MariaDBAvailable(); err != nil {
		return err
	}
	if _, err := galeraProvider(); err != nil {
		return err
	}
	if _, err := findBinary("rsync"); err != nil {
		return err
	}
	if _, err := findBinary("wsrep_sst_rsync"); err != nil {
		return err
	}
	return nil
}

func galeraProvider() (string, error) {
	for _, p := range galeraProviders {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", errNoGalera
}

// StartGalera starts a Galera cluster of Nodes nodes and waits until every node is Synced and sees
// the whole cluster. It returns an error, leaving nothing running, when a binary is missing or a node
// does not start in time.
func StartGalera(ctx context.Context, opts *GaleraOptions) (_ *Galera, err error) {
	var o GaleraOptions
	if opts != nil {
		o = *opts
	}
	o.Nodes = cmp.Or(o.Nodes, DefaultGaleraNodes)
	o.SuspectTimeout = cmp.Or(o.SuspectTimeout, DefaultGaleraSuspectTimeout)
	o.StartTimeout = cmp.Or(o.StartTimeout, DefaultMariaDBStartTimeout)
	if o.Nodes < 1 {
		return nil, fmt.Errorf("cluster: Galera needs at least one node, got %d", o.Nodes)
	}
	if err := GaleraAvailable(); err != nil {
		return nil, err
	}
	provider, _ := galeraProvider()
	bin, _ := findBinary("mariadbd", "mysqld")
	su, err := lookupServerUser(true)
	if err != nil {
		return nil, err
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	g := &Galera{o: o, dir: o.Dir, name: "idemkit-" + hex.EncodeToString(b[:])}
	if g.dir == "" {
		if g.dir, err = os.MkdirTemp("", "idemkit-galera-*"); err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
		g.ownDir = true
		if err := os.Chmod(g.dir, 0o755); err != nil { // the mysql user must reach the node directories
			return nil, fmt.Errorf("cluster: %w", err)
		}
	}
	defer func() {
		if err != nil {
			g.Stop()
		}
	}()

	for attempt := 0; ; attempt++ {
		err = g.start(ctx, provider, bin, su)
		if err == nil {
			return g, nil
		}
		for _, n := range g.nodes {
			_ = n.Kill()
		}
		if attempt == 2 || ctx.Err() != nil || !strings.Contains(err.Error(), "in use") {
			return nil, err
		}
		// A port was taken between choosing and binding it: start over with new ones.
	}
}

func (g *Galera) start(ctx context.Context, provider, bin string, su serverUser) error {
	ports, err := freePorts(4 * g.o.Nodes)
	if err != nil {
		return err
	}
	g.nodes = g.nodes[:0]
	var members []string
	for i := range g.o.Nodes {
		members = append(members, "127.0.0.1:"+strconv.Itoa(ports[4*i+1]))
	}
	for i := range g.o.Nodes {
		dir := filepath.Join(g.dir, fmt.Sprintf("node%d-%d", i, ports[4*i]))
		n := &MariaNode{index: i, name: fmt.Sprintf("node%d", i), dir: dir, data: filepath.Join(dir, "data"),
			cnf: filepath.Join(dir, "my.cnf"), port: ports[4*i], g: g, su: su, bin: bin, timeout: g.o.StartTimeout}
		gport, ist, sst := ports[4*i+1], ports[4*i+2], ports[4*i+3]
		if err := os.MkdirAll(n.data, 0o755); err != nil {
			return fmt.Errorf("cluster: %w", err)
		}
		providerOpts := []string{
			"gmcast.listen_addr=tcp://127.0.0.1:" + strconv.Itoa(gport),
			"ist.recv_addr=127.0.0.1:" + strconv.Itoa(ist),
			"gcache.size=64M",
			"evs.suspect_timeout=" + isoSeconds(g.o.SuspectTimeout),
			"evs.inactive_timeout=" + isoSeconds(3*g.o.SuspectTimeout),
			"evs.keepalive_period=PT1S",
			"evs.inactive_check_period=PT0.5S",
		}
		extra := []string{
			"binlog_format=ROW",
			"default-storage-engine=InnoDB",
			"innodb_autoinc_lock_mode=2",
			"wsrep_on=ON",
			"wsrep_provider=" + provider,
			"wsrep_cluster_name=" + g.name,
			"wsrep_cluster_address=gcomm://" + strings.Join(members, ","),
			"wsrep_node_name=" + n.name,
			"wsrep_node_address=127.0.0.1:" + strconv.Itoa(gport),
			`wsrep_provider_options="` + strings.Join(providerOpts, ";") + `"`,
			"wsrep_sst_method=rsync",
			"wsrep_sst_receive_address=127.0.0.1:" + strconv.Itoa(sst),
			"wsrep_slave_threads=2",
			// Writes stall while the group drops a dead node (evs.suspect_timeout, then the view
			// change), and so do the local transactions waiting for their locks: past MariaNode's
			// 5s they failed with lock wait timeouts (1205) instead of going on once the view
			// changed. Wait as long as the group may take to drop a node, evs.inactive_timeout.
			"innodb-lock-wait-timeout=" + strconv.Itoa(int((3*g.o.SuspectTimeout).Seconds()+0.5)),
		}
		if err := n.writeConfig(append(extra, g.o.Extra...)); err != nil {
			return fmt.Errorf("cluster: %w", err)
		}
		if err := su.own(dir); err != nil {
			return fmt.Errorf("cluster: %w", err)
		}
		g.nodes = append(g.nodes, n)
	}
	if err := g.nodes[0].install(ctx); err != nil {
		return err
	}
	if err := g.nodes[0].start(ctx, "--wsrep-new-cluster"); err != nil {
		return err
	}
	for _, n := range g.nodes[1:] {
		if err := n.start(ctx); err != nil {
			return err
		}
	}
	return g.WaitSynced(ctx)
}

// isoSeconds formats d as an ISO 8601 duration in seconds, as Galera's options want it.
func isoSeconds(d time.Duration) string {
	return "PT" + strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + "S"
}

// Nodes returns the nodes in order; node 0 bootstrapped the cluster.
func (g *Galera) Nodes() []*MariaNode { return slices.Clone(g.nodes) }

// Node returns node i.
func (g *Galera) Node(i int) *MariaNode { return g.nodes[i] }

// Name returns the cluster's name (wsrep_cluster_name), unique per start.
func (g *Galera) Name() string { return g.name }

// Dir returns the directory holding the nodes' directories.
func (g *Galera) Dir() string { return g.dir }

// WaitSynced waits until every running node is Synced, ready, and counts every running node in its
// cluster view (wsrep_cluster_size), in the primary component.
//
// While some node is down (killed), no running node is in a primary component and that lasts
// longer than the suspect timeout, WaitSynced restores one as an operator would: it bootstraps
// the running node that committed most (pc.bootstrap=YES), the others join it, and it reports so
// through Logf and [Galera.Restored]. Galera itself does not: a node that lost the primary
// component (one survivor starved of CPU for longer than evs.suspect_timeout right after another
// node was killed is enough: each survivor suspects the other and stays alone, without quorum)
// waits for every member of the last primary component to come back, the killed node included,
// which a test restarts only after WaitSynced. The harness can do it safely because it knows what
// Galera does not: the nodes that are down are dead, not on the other side of a partition.
func (g *Galera) WaitSynced(ctx context.Context) error {
	var last error
	for {
		if last = g.synced(ctx); last == nil {
			return nil
		}
		if err := g.restorePrimary(ctx); err != nil {
			last = fmt.Errorf("%w; restoring the primary component: %w", last, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster: Galera not synced: %w (%w)", last, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Restored returns what WaitSynced did to restore a lost primary component, one line each; nil
// when it never had to.
func (g *Galera) Restored() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.restored)
}

// restorePrimary bootstraps the most advanced running node when some node is down and no running
// node has been in a primary component for longer than the suspect timeout (see WaitSynced).
func (g *Galera) restorePrimary(ctx context.Context) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	var down []string
	var running []*MariaNode
	for _, n := range g.nodes {
		if n.Running() {
			running = append(running, n)
		} else {
			down = append(down, n.name)
		}
	}
	if len(down) == 0 || len(running) == 0 {
		g.lostSince = time.Time{}
		return nil // with every node up, Galera re-forms the primary component by itself
	}
	var best *MariaNode
	var bestSeqno int64 = -1
	var states []string
	for _, n := range running {
		qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		st, err := n.Status(qctx)
		cancel()
		if err != nil || st["wsrep_cluster_status"] == "Primary" {
			g.lostSince = time.Time{} // a primary component, or a node that cannot tell
			return nil
		}
		seqno, err := strconv.ParseInt(st["wsrep_last_committed"], 10, 64)
		if err != nil {
			seqno = -1
		}
		states = append(states, fmt.Sprintf("%s %s/%s, last committed %s", n.name,
			st["wsrep_cluster_status"], st["wsrep_local_state_comment"], st["wsrep_last_committed"]))
		if seqno > bestSeqno {
			best, bestSeqno = n, seqno
		}
	}
	if g.lostSince.IsZero() {
		g.lostSince = time.Now()
	}
	lost := time.Since(g.lostSince)
	if lost < g.o.SuspectTimeout {
		return nil // a view change may still be under way
	}
	db, err := sql.Open("mysql", best.DSN(""))
	if err != nil {
		return err
	}
	defer db.Close()
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := db.ExecContext(qctx, "SET GLOBAL wsrep_provider_options='pc.bootstrap=YES'"); err != nil {
		return fmt.Errorf("%s: %w", best.name, err)
	}
	g.lostSince = time.Time{}
	msg := fmt.Sprintf("no running node in a primary component for %s while %s down (%s): bootstrapped %s (pc.bootstrap=YES)",
		lost.Round(time.Millisecond), strings.Join(down, ", "), strings.Join(states, "; "), best.name)
	g.restored = append(g.restored, msg)
	if g.o.Logf != nil {
		g.o.Logf("cluster %s: PRIMARY COMPONENT LOST AND RESTORED BY THE HARNESS: %s", g.name, msg)
	}
	return nil
}

// Stall freezes the node's mariadbd (SIGSTOP to its process group) for d, then lets it go on (SIGCONT), as a starved
// CPU would: meanwhile it sends and answers nothing, not even to its cluster.
func (n *MariaNode) Stall(ctx context.Context, d time.Duration) error {
	n.mu.Lock()
	p := n.p
	n.mu.Unlock()
	if p == nil || p.exited() {
		return fmt.Errorf("cluster: %s is not running", n.name)
	}
	if err := syscall.Kill(-p.pid(), syscall.SIGSTOP); err != nil { // its process group: mariadbd under its wrapper
		return fmt.Errorf("cluster: %s: %w", n.name, err)
	}
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
	if err := syscall.Kill(-p.pid(), syscall.SIGCONT); err != nil {
		return fmt.Errorf("cluster: %s: %w", n.name, err)
	}
	return nil
}

func (g *Galera) synced(ctx context.Context) error {
	running := 0
	for _, n := range g.nodes {
		if n.Running() {
			running++
		}
	}
	for _, n := range g.nodes {
		if !n.Running() {
			continue
		}
		qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		st, err := n.Status(qctx)
		cancel()
		if err != nil {
			return fmt.Errorf("%s: %w", n.name, err)
		}
		switch {
		case st["wsrep_local_state_comment"] != "Synced" || st["wsrep_ready"] != "ON":
			return fmt.Errorf("%s: state %q, ready %q", n.name, st["wsrep_local_state_comment"], st["wsrep_ready"])
		case st["wsrep_cluster_status"] != "Primary":
			return fmt.Errorf("%s: component %q", n.name, st["wsrep_cluster_status"])
		case st["wsrep_cluster_size"] != strconv.Itoa(running):
			return fmt.Errorf("%s: cluster size %s, %d nodes running", n.name, st["wsrep_cluster_size"], running)
		}
	}
	return nil
}

// Stop kills every node and removes the directory when StartGalera created it.
func (g *Galera) Stop() {
	for _, n := range g.nodes {
		_ = n.Kill()
	}
	if g.ownDir {
		_ = os.RemoveAll(g.dir)
	}
}

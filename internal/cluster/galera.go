//go:build unix

package cluster

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Defaults of [GaleraOptions].
const (
	DefaultGaleraNodes = 3
	// DefaultGaleraSuspectTimeout is evs.suspect_timeout: how long the group waits for a silent node
	// before it drops it from the view. Writes stall meanwhile (every node must receive each write
	// set). Galera's default is 5s; the tests want faults handled in a few seconds.
	DefaultGaleraSuspectTimeout = 3 * time.Second
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
	// SuspectTimeout is evs.suspect_timeout. Defaults to DefaultGaleraSuspectTimeout.
	SuspectTimeout time.Duration
	// StartTimeout bounds each node's start, state transfer included. Defaults to
	// DefaultMariaDBStartTimeout (2m).
	StartTimeout time.Duration
	// Extra holds more option lines (name=value) for every node's [mysqld] section.
	Extra []string
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
			"evs.inactive_timeout=" + isoSeconds(2*g.o.SuspectTimeout),
			"evs.keepalive_period=PT0.5S",
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
func (g *Galera) WaitSynced(ctx context.Context) error {
	var last error
	for {
		if last = g.synced(ctx); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster: Galera not synced: %w (%w)", last, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
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

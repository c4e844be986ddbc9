//go:build unix

package cluster

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Defaults of [RedisClusterOptions].
const (
	DefaultRedisMasters  = 3
	DefaultRedisReplicas = 1
	// DefaultRedisNodeTimeout is cluster-node-timeout: how long a master may be unreachable before the
	// others mark it failed and its replica takes over. Redis's own default is 15s; a test wants a
	// failover in seconds.
	DefaultRedisNodeTimeout = time.Second
	// DefaultRedisStartTimeout bounds StartRedisCluster: starting the nodes, creating the cluster and
	// waiting until every node reports cluster_state:ok.
	DefaultRedisStartTimeout = time.Minute
)

// redisSlots is the number of hash slots of a Redis Cluster.
const redisSlots = 16384

// RedisClusterOptions configure [StartRedisCluster]. The zero value works.
type RedisClusterOptions struct {
	// Masters is the number of masters the slots are spread over. Defaults to DefaultRedisMasters (3).
	Masters int
	// Replicas is the number of replicas per master. Defaults to DefaultRedisReplicas (1); negative
	// means none.
	Replicas int
	// NodeTimeout is the nodes' cluster-node-timeout. Defaults to DefaultRedisNodeTimeout (1s).
	NodeTimeout time.Duration
	// Dir holds one directory per node (nodes.conf, log). Defaults to a new temporary directory that
	// Stop removes.
	Dir string
	// StartTimeout bounds the start. Defaults to DefaultRedisStartTimeout (1m).
	StartTimeout time.Duration
}

// RedisCluster is a Redis Cluster of private redis-server processes on free loopback ports, created
// with redis-cli --cluster create. Nodes keep no data on disk (no RDB, no AOF): a node killed and
// restarted comes back empty and, once a replica has taken its slots over, rejoins as a replica of the
// new master. Its methods are safe for concurrent use.
type RedisCluster struct {
	o      RedisClusterOptions
	dir    string
	ownDir bool
	server string
	nodes  []*RedisNode
}

// RedisNode is one redis-server of a [RedisCluster].
type RedisNode struct {
	c       *RedisCluster // nil for a standalone server
	server  string
	extra   []string // arguments after the common ones (cluster mode)
	index   int
	port    int
	busPort int
	dir     string

	mu   sync.Mutex
	p    *process
	runs int
}

// StartRedisCluster starts Masters × (1 + Replicas) redis-server processes with cluster mode on,
// each on its own free loopback port and cluster bus port (cluster-port), joins them with
// redis-cli --cluster create --cluster-replicas, and waits until every node reports cluster_state:ok
// and knows every other node. It returns an error, leaving nothing running, when redis-server or
// redis-cli is missing, a node does not start, or the cluster does not form within StartTimeout.
func StartRedisCluster(ctx context.Context, opts *RedisClusterOptions) (_ *RedisCluster, err error) {
	var o RedisClusterOptions
	if opts != nil {
		o = *opts
	}
	o.Masters = cmp.Or(o.Masters, DefaultRedisMasters)
	o.Replicas = cmp.Or(o.Replicas, DefaultRedisReplicas)
	o.Replicas = max(o.Replicas, 0)
	o.NodeTimeout = cmp.Or(o.NodeTimeout, DefaultRedisNodeTimeout)
	o.StartTimeout = cmp.Or(o.StartTimeout, DefaultRedisStartTimeout)
	if o.Masters < 3 {
		return nil, fmt.Errorf("cluster: a Redis Cluster needs at least 3 masters, got %d", o.Masters)
	}
	if o.NodeTimeout < 100*time.Millisecond {
		return nil, fmt.Errorf("cluster: Redis NodeTimeout %s under 100ms", o.NodeTimeout)
	}
	if err := RedisAvailable(); err != nil {
		return nil, err
	}
	server, _ := exec.LookPath("redis-server")
	cli, _ := exec.LookPath("redis-cli")
	ctx, cancel := context.WithTimeout(ctx, o.StartTimeout)
	defer cancel()

	c := &RedisCluster{o: o, dir: o.Dir, server: server}
	if c.dir == "" {
		if c.dir, err = os.MkdirTemp("", "idemkit-redis-cluster-*"); err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
		c.ownDir = true
	}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	n := o.Masters * (1 + o.Replicas)
	for attempt := 0; ; attempt++ {
		ports, err := freePorts(2 * n)
		if err != nil {
			return nil, err
		}
		c.nodes = c.nodes[:0]
		for i := range n {
			nd := &RedisNode{c: c, server: server, index: i, port: ports[2*i], busPort: ports[2*i+1],
				dir: filepath.Join(c.dir, "node"+strconv.Itoa(i))}
			nd.extra = []string{
				"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
				"--cluster-port", strconv.Itoa(nd.busPort), "--cluster-announce-ip", "127.0.0.1",
				"--cluster-node-timeout", strconv.FormatInt(o.NodeTimeout.Milliseconds(), 10),
			}
			c.nodes = append(c.nodes, nd)
		}
		err = c.startNodes(ctx)
		if err == nil {
			break
		}
		for _, nd := range c.nodes {
			_ = nd.Kill()
		}
		if attempt == 2 || ctx.Err() != nil { // a port taken in between is worth two more tries
			return nil, err
		}
	}

	args := []string{"--cluster", "create"}
	args = append(args, c.Addrs()...)
	args = append(args, "--cluster-replicas", strconv.Itoa(o.Replicas), "--cluster-yes")
	out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("cluster: redis-cli --cluster create: %w\n%s", err, out)
	}
	if err := c.WaitHealthy(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// RedisAvailable reports whether redis-server and redis-cli are on PATH, and if not, why.
func RedisAvailable() error {
	for _, b := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(b); err != nil {
			return fmt.Errorf("cluster: %s not found on PATH: %w", b, err)
		}
	}
	return nil
}

func (c *RedisCluster) startNodes(ctx context.Context) error {
	for _, nd := range c.nodes {
		if err := nd.start(ctx); err != nil {
			return err
		}
	}
	return nil
}

// Addrs returns every node's address (host:port), in node order, whatever their state.
func (c *RedisCluster) Addrs() []string {
	out := make([]string, len(c.nodes))
	for i, nd := range c.nodes {
		out[i] = nd.Addr()
	}
	return out
}

// Nodes returns the nodes, in the order of Addrs.
func (c *RedisCluster) Nodes() []*RedisNode { return slices.Clone(c.nodes) }

// Dir returns the directory holding the nodes' directories.
func (c *RedisCluster) Dir() string { return c.dir }

// NewClient returns a cluster client seeded with every node's address. o may be nil; Addrs is
// always replaced, and ContextTimeoutEnabled is set (so context deadlines bound socket I/O), with
// DialTimeout, ReadTimeout and WriteTimeout defaulting to 1s. The caller closes it.
func (c *RedisCluster) NewClient(o *redis.ClusterOptions) *redis.ClusterClient {
	var co redis.ClusterOptions
	if o != nil {
		co = *o
	}
	co.Addrs = c.Addrs()
	co.ContextTimeoutEnabled = true
	co.DialTimeout = cmp.Or(co.DialTimeout, time.Second)
	co.ReadTimeout = cmp.Or(co.ReadTimeout, time.Second)
	co.WriteTimeout = cmp.Or(co.WriteTimeout, time.Second)
	return redis.NewClusterClient(&co)
}

// Stop kills every node and removes the directory when StartRedisCluster created it.
func (c *RedisCluster) Stop() {
	for _, nd := range c.nodes {
		_ = nd.Kill()
	}
	if c.ownDir {
		_ = os.RemoveAll(c.dir)
	}
}

// Addr returns the node's address, host:port; it stays the same across Restart.
func (n *RedisNode) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(n.port)) }

// Index returns the node's position in [RedisCluster.Nodes].
func (n *RedisNode) Index() int { return n.index }

// Running reports whether the node's process is running.
func (n *RedisNode) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.p != nil && !n.p.exited()
}

// Kill SIGKILLs the node (kill -9): no shutdown, no last words to the cluster. Killing a stopped
// node does nothing.
func (n *RedisNode) Kill() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.p == nil {
		return nil
	}
	err := n.p.kill()
	n.p = nil
	return err
}

// Restart starts a killed node again on the same ports with its nodes.conf, so it rejoins the
// cluster; with no data kept, it comes back empty. Restart a killed master only after its replica
// took over (see [RedisCluster.WaitFailover]): an empty master that returns first would serve its
// slots empty. Restarting a running node does nothing.
func (n *RedisNode) Restart(ctx context.Context) error {
	if n.Running() {
		return nil
	}
	return n.start(ctx)
}

func (n *RedisNode) start(ctx context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := os.MkdirAll(n.dir, 0o755); err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	n.runs++
	logPath := filepath.Join(n.dir, "redis.log")
	args := []string{
		"--port", strconv.Itoa(n.port), "--bind", "127.0.0.1", "--dir", n.dir,
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--protected-mode", "yes",
		// A new replica syncs at once instead of waiting 5s for others to share the transfer: a
		// replica that never synced cannot take over.
		"--repl-diskless-sync-delay", "0",
		"--logfile", logPath,
	}
	cmd := exec.Command(n.server, append(args, n.extra...)...)
	cmd.Dir = n.dir
	p, err := startProcess("redis-server "+n.Addr(), cmd, nil)
	if err != nil {
		return err
	}
	n.p = p
	deadline := time.Now().Add(10 * time.Second)
	for {
		if p.exited() {
			n.p = nil
			return fmt.Errorf("cluster: redis-server on %s exited during start: %v\n%s", n.Addr(), p.err, tailFile(logPath, 2000))
		}
		err := pingRedis(n.Addr())
		if err == nil {
			return nil
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			_ = p.kill()
			n.p = nil
			return fmt.Errorf("cluster: redis-server on %s not answering: %w", n.Addr(), errors.Join(err, ctx.Err()))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// StartRedis starts one standalone private redis-server (no cluster mode, no persistence) on a free
// loopback port in a new temporary directory. Stop it with [RedisNode.Stop].
func StartRedis(ctx context.Context) (*RedisNode, error) {
	server, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("cluster: redis-server not found on PATH: %w", err)
	}
	dir, err := os.MkdirTemp("", "idemkit-redis-*")
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	var lastErr error
	for range 3 { // the free port may be taken before redis-server binds it
		ports, err := freePorts(1)
		if err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
		n := &RedisNode{server: server, port: ports[0], dir: dir}
		if lastErr = n.start(ctx); lastErr == nil {
			return n, nil
		}
	}
	_ = os.RemoveAll(dir)
	return nil, lastErr
}

// Stop kills a standalone server and removes its directory; for a cluster node use
// [RedisCluster.Stop].
func (n *RedisNode) Stop() {
	_ = n.Kill()
	if n.c == nil {
		_ = os.RemoveAll(n.dir)
	}
}

// client returns a single-node client of n (no cluster redirections), for CLUSTER commands.
func (n *RedisNode) client() *redis.Client {
	return redis.NewClient(&redis.Options{Addr: n.Addr(), ContextTimeoutEnabled: true,
		DialTimeout: 500 * time.Millisecond, ReadTimeout: time.Second, MaxRetries: -1})
}

// Do sends one command to this node alone (no cluster redirections) over a fresh connection.
func (n *RedisNode) Do(ctx context.Context, args ...any) (any, error) {
	cl := n.client()
	defer cl.Close()
	return cl.Do(ctx, args...).Result()
}

// pingRedis sends PING over a fresh connection and checks for PONG.
func pingRedis(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 500*time.Millisecond)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	buf := make([]byte, 64)
	k, err := c.Read(buf)
	if err != nil {
		return err
	}
	if !bytes.HasPrefix(buf[:k], []byte("+PONG")) {
		return fmt.Errorf("PING answered %q", buf[:k])
	}
	return nil
}

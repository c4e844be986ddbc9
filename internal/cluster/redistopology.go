//go:build unix

package cluster

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"
)

// RedisRole is a node's place in the cluster as one node sees it (CLUSTER NODES).
type RedisRole struct {
	Node   *RedisNode
	ID     string
	Master bool
	// MasterOf is the master a replica replicates (nil for a master).
	MasterOf *RedisNode
	// Failed is set when the node is flagged fail or pfail.
	Failed bool
	// Slots is the number of hash slots a master serves.
	Slots int
}

// Topology asks the first running node for CLUSTER NODES and returns the role of every node it knows,
// in node order.
func (c *RedisCluster) Topology(ctx context.Context) ([]RedisRole, error) {
	var lastErr error
	for _, nd := range c.nodes {
		if !nd.Running() {
			continue
		}
		v, err := nd.Do(ctx, "CLUSTER", "NODES")
		if err != nil {
			lastErr = err
			continue
		}
		s, _ := v.(string)
		return c.parseNodes(s)
	}
	return nil, fmt.Errorf("cluster: no running node answered CLUSTER NODES: %w", cmp.Or(lastErr, errNotReady))
}

func (c *RedisCluster) byPort(addr string) *RedisNode {
	hostPort, _, _ := strings.Cut(addr, "@")
	_, port, _ := net.SplitHostPort(hostPort)
	for _, nd := range c.nodes {
		if strconv.Itoa(nd.port) == port {
			return nd
		}
	}
	return nil
}

func (c *RedisCluster) parseNodes(s string) ([]RedisRole, error) {
	type line struct {
		role     RedisRole
		masterID string
	}
	var lines []line
	byID := map[string]*RedisNode{}
	for l := range strings.SplitSeq(strings.TrimSpace(s), "\n") {
		f := strings.Fields(l)
		if len(f) < 8 {
			return nil, fmt.Errorf("cluster: unexpected CLUSTER NODES line %q", l)
		}
		nd := c.byPort(f[1])
		if nd == nil {
			continue // a node of another cluster? not ours
		}
		flags := f[2]
		r := RedisRole{Node: nd, ID: f[0], Master: strings.Contains(flags, "master"),
			Failed: strings.Contains(flags, "fail")}
		for _, sl := range f[8:] {
			if strings.HasPrefix(sl, "[") { // a slot being migrated
				continue
			}
			lo, hi, isRange := strings.Cut(sl, "-")
			a, err1 := strconv.Atoi(lo)
			b := a
			var err2 error
			if isRange {
				b, err2 = strconv.Atoi(hi)
			}
			if err1 != nil || err2 != nil {
				return nil, fmt.Errorf("cluster: bad slot range %q in %q", sl, l)
			}
			r.Slots += b - a + 1
		}
		byID[f[0]] = nd
		lines = append(lines, line{role: r, masterID: f[3]})
	}
	out := make([]RedisRole, 0, len(lines))
	for _, l := range lines {
		if !l.role.Master {
			l.role.MasterOf = byID[l.masterID]
		}
		out = append(out, l.role)
	}
	slices.SortFunc(out, func(a, b RedisRole) int { return a.Node.index - b.Node.index })
	return out, nil
}

// MasterOf returns the node serving key's slot, as the first running node sees it.
func (c *RedisCluster) MasterOf(ctx context.Context, key string) (*RedisNode, error) {
	for _, nd := range c.nodes {
		if !nd.Running() {
			continue
		}
		cl := nd.client()
		slot, err := cl.ClusterKeySlot(ctx, key).Result()
		if err != nil {
			cl.Close()
			continue
		}
		slots, err := cl.ClusterSlots(ctx).Result()
		cl.Close()
		if err != nil {
			continue
		}
		for _, s := range slots {
			if int64(s.Start) <= slot && slot <= int64(s.End) && len(s.Nodes) > 0 {
				if m := c.byPort(s.Nodes[0].Addr); m != nil {
					return m, nil
				}
			}
		}
		return nil, fmt.Errorf("cluster: no master serves slot %d of %q", slot, key)
	}
	return nil, fmt.Errorf("cluster: no running node: %w", errNotReady)
}

// WaitHealthy waits until every running node reports cluster_state:ok, every slot is served by a
// running master, and the running nodes agree on who the masters are. It returns the last thing seen
// wrong when ctx ends first.
func (c *RedisCluster) WaitHealthy(ctx context.Context) error {
	var why error
	for {
		if why = c.healthy(ctx); why == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster: Redis Cluster not healthy: %w (%w)", why, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (c *RedisCluster) healthy(ctx context.Context) error {
	var masters string
	for _, nd := range c.nodes {
		if !nd.Running() {
			continue
		}
		v, err := nd.Do(ctx, "CLUSTER", "INFO")
		if err != nil {
			return fmt.Errorf("%s: %w", nd.Addr(), err)
		}
		if s, _ := v.(string); !strings.Contains(s, "cluster_state:ok") {
			return fmt.Errorf("%s: cluster_state not ok", nd.Addr())
		}
		v, err = nd.Do(ctx, "CLUSTER", "NODES")
		if err != nil {
			return fmt.Errorf("%s: %w", nd.Addr(), err)
		}
		s, _ := v.(string)
		roles, err := c.parseNodes(s)
		if err != nil {
			return err
		}
		if len(roles) != len(c.nodes) {
			return fmt.Errorf("%s knows %d of %d nodes", nd.Addr(), len(roles), len(c.nodes))
		}
		var b strings.Builder
		slots := 0
		for _, r := range roles {
			switch {
			case r.Master && r.Slots > 0:
				if !r.Node.Running() || r.Failed {
					return fmt.Errorf("%s sees slots on %s, which is down", nd.Addr(), r.Node.Addr())
				}
				slots += r.Slots
				fmt.Fprintf(&b, "%d,", r.Node.index)
			case !r.Node.Running():
			case r.Failed:
				return fmt.Errorf("%s sees %s, which runs, as failed", nd.Addr(), r.Node.Addr())
			case r.Master || r.MasterOf == nil || !r.MasterOf.Running():
				// Every running node ends as a master with slots or a replica of a running master.
				return fmt.Errorf("%s sees %s neither serving slots nor replicating a running master", nd.Addr(), r.Node.Addr())
			case r.Node == nd:
				// A replica can take over only once it has synced with its master.
				v, err := nd.Do(ctx, "INFO", "replication")
				if err != nil {
					return fmt.Errorf("%s: %w", nd.Addr(), err)
				}
				if s, _ := v.(string); !strings.Contains(s, "master_link_status:up") {
					return fmt.Errorf("replica %s has not synced with its master yet", nd.Addr())
				}
			}
		}
		if slots != redisSlots {
			return fmt.Errorf("%s sees %d of %d slots served", nd.Addr(), slots, redisSlots)
		}
		if masters == "" {
			masters = b.String()
		} else if masters != b.String() {
			return fmt.Errorf("nodes disagree on the masters: %s vs %s", masters, b.String())
		}
	}
	if masters == "" {
		return errors.New("no node running")
	}
	return nil
}

// ReplicasOf returns the running nodes that replicate master, as the first running node sees it.
func (c *RedisCluster) ReplicasOf(ctx context.Context, master *RedisNode) ([]*RedisNode, error) {
	roles, err := c.Topology(ctx)
	if err != nil {
		return nil, err
	}
	var out []*RedisNode
	for _, r := range roles {
		if !r.Master && r.MasterOf == master && r.Node.Running() {
			out = append(out, r.Node)
		}
	}
	return out, nil
}

// WaitFailover waits until failed serves no slot any more (a replica took them over) and the cluster
// is healthy again ([RedisCluster.WaitHealthy]).
func (c *RedisCluster) WaitFailover(ctx context.Context, failed *RedisNode) error {
	for {
		err := c.WaitHealthy(ctx)
		if err != nil {
			return err
		}
		roles, err := c.Topology(ctx)
		if err != nil {
			return err
		}
		still := false
		for _, r := range roles {
			still = still || (r.Node == failed && r.Master && r.Slots > 0)
		}
		if !still {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster: %s still serves slots: %w", failed.Addr(), ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// HoldFailover stops master's replicas from taking its slots over on their own
// (cluster-replica-no-failover yes), so a killed master stays down until the caller has seen what it
// waits for; the returned release lets them again, and the first of them elected takes over. Keep the
// hold short: a replica whose master has been silent for longer than ten cluster-node-timeouts
// (cluster-replica-validity-factor) plus repl-ping-replica-period (10 s) refuses to be elected.
func (c *RedisCluster) HoldFailover(ctx context.Context, master *RedisNode) (release func(context.Context) error, err error) {
	replicas, err := c.ReplicasOf(ctx, master)
	if err != nil {
		return nil, err
	}
	if len(replicas) == 0 {
		return nil, fmt.Errorf("cluster: %s has no running replica", master.Addr())
	}
	set := func(ctx context.Context, v string) error {
		var errs []error
		for _, r := range replicas {
			if _, err := r.Do(ctx, "CONFIG", "SET", "cluster-replica-no-failover", v); err != nil {
				errs = append(errs, fmt.Errorf("cluster: %s: CONFIG SET cluster-replica-no-failover %s: %w", r.Addr(), v, err))
			}
		}
		return errors.Join(errs...)
	}
	if err := set(ctx, "yes"); err != nil {
		return nil, errors.Join(err, set(context.WithoutCancel(ctx), "no"))
	}
	return func(ctx context.Context) error { return set(ctx, "no") }, nil
}

// Failover asks replica to take its master's slots over with CLUSTER FAILOVER (a coordinated
// switch: the master stops writes until the replica caught up, so nothing acknowledged is lost) and
// waits until it serves them and the cluster is healthy.
func (c *RedisCluster) Failover(ctx context.Context, replica *RedisNode) error {
	if _, err := replica.Do(ctx, "CLUSTER", "FAILOVER"); err != nil {
		return fmt.Errorf("cluster: CLUSTER FAILOVER on %s: %w", replica.Addr(), err)
	}
	for {
		roles, err := c.Topology(ctx)
		if err == nil {
			for _, r := range roles {
				if r.Node == replica && r.Master && r.Slots > 0 {
					return c.WaitHealthy(ctx)
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster: %s did not become a master: %w", replica.Addr(), errors.Join(err, ctx.Err()))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

//go:build unix

// Command clusterup starts one of the clusters of package internal/cluster on this machine — a
// 6-node Redis Cluster, a 3-node Galera cluster, or two DTM servers sharing a MariaDB store behind a
// failover proxy — prints how to reach it, and either waits for Ctrl-C or runs a command with the
// addresses in its environment, optionally killing a node while the command runs. Everything is
// stopped and removed when it returns.
//
//	go run ./internal/cluster/cmd/clusterup redis                 # prints IDEMKIT_CLUSTER_REDIS=..., waits
//	go run ./internal/cluster/cmd/clusterup -kill-after 5s dtm -- go run ./examples/order-pay-inventory
//
// Environment given to the command: IDEMKIT_CLUSTER_REDIS (comma-separated node addresses),
// IDEMKIT_CLUSTER_GALERA (comma-separated go-sql-driver DSNs, one per node, no database),
// IDEMKIT_CLUSTER_DTM and IDEMKIT_DEMO_DTM (the DTM API base through the proxy, which the example
// reads).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/idemkit/idemkit/internal/cluster"
)

func main() {
	os.Exit(run())
}

func run() int {
	killAfter := flag.Duration("kill-after", 0, "with a command: SIGKILL a node this long after it started (redis: a master, then wait for the failover; galera: node 2, restarted after 2s; dtm: server 0)")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: clusterup [-kill-after d] redis|galera|dtm [-- command args...]")
		flag.PrintDefaults()
	}
	flag.Parse()
	args := flag.Args()
	if len(args) == 0 {
		flag.Usage()
		return 2
	}
	kind, cmdArgs := args[0], args[1:]
	if len(cmdArgs) > 0 && cmdArgs[0] == "--" {
		cmdArgs = cmdArgs[1:]
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	var env []string
	var kill func(context.Context) error
	switch kind {
	case "redis":
		c, err := cluster.StartRedisCluster(ctx, nil)
		if err != nil {
			return fail(err)
		}
		defer c.Stop()
		env = []string{"IDEMKIT_CLUSTER_REDIS=" + strings.Join(c.Addrs(), ",")}
		kill = func(ctx context.Context) error {
			roles, err := c.Topology(ctx)
			if err != nil {
				return err
			}
			for _, r := range roles {
				if r.Master && r.Slots > 0 {
					fmt.Fprintf(os.Stderr, "clusterup: killing master %s\n", r.Node.Addr())
					t0 := time.Now()
					if err := r.Node.Kill(); err != nil {
						return err
					}
					if err := c.WaitFailover(ctx, r.Node); err != nil {
						return err
					}
					fmt.Fprintf(os.Stderr, "clusterup: failover done in %s\n", time.Since(t0).Round(time.Millisecond))
					return r.Node.Restart(ctx)
				}
			}
			return errors.New("no master found")
		}
	case "galera":
		g, err := cluster.StartGalera(ctx, nil)
		if err != nil {
			return fail(err)
		}
		defer g.Stop()
		var dsns []string
		for _, n := range g.Nodes() {
			dsns = append(dsns, n.DSN(""))
		}
		env = []string{"IDEMKIT_CLUSTER_GALERA=" + strings.Join(dsns, ",")}
		kill = func(ctx context.Context) error {
			n := g.Node(2)
			fmt.Fprintf(os.Stderr, "clusterup: killing %s\n", n.Name())
			if err := n.Kill(); err != nil {
				return err
			}
			time.Sleep(2 * time.Second)
			if err := n.Restart(ctx); err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "clusterup: %s rejoined by %s\n", n.Name(), n.Rejoin())
			return nil
		}
	case "dtm":
		d, err := cluster.StartDTMCluster(ctx, &cluster.DTMClusterOptions{BuildProgress: os.Stderr})
		if err != nil {
			return fail(err)
		}
		defer d.Stop()
		env = []string{"IDEMKIT_CLUSTER_DTM=" + d.URL(), "IDEMKIT_DEMO_DTM=" + d.URL()}
		kill = func(context.Context) error {
			fmt.Fprintf(os.Stderr, "clusterup: killing DTM server 0 (%s)\n", d.Servers()[0].URL())
			return d.Servers()[0].Kill()
		}
		defer func() {
			fwd, over, none := d.Proxy().Stats()
			fmt.Fprintf(os.Stderr, "clusterup: proxy answered %d requests, %d after failing over, %d found no server\n", fwd, over, none)
		}()
	default:
		flag.Usage()
		return 2
	}
	for _, e := range env {
		fmt.Println(e)
	}
	if len(cmdArgs) == 0 {
		fmt.Fprintln(os.Stderr, "clusterup: running; Ctrl-C stops and removes it")
		<-ctx.Done()
		return 0
	}
	cmd := exec.CommandContext(ctx, cmdArgs[0], cmdArgs[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		return fail(err)
	}
	killErr := make(chan error, 1)
	if *killAfter > 0 {
		go func() {
			select {
			case <-time.After(*killAfter):
				killErr <- kill(ctx)
			case <-ctx.Done():
			}
		}()
	}
	err := cmd.Wait()
	select {
	case kerr := <-killErr:
		if kerr != nil {
			fmt.Fprintln(os.Stderr, "clusterup: kill:", kerr)
			return 1
		}
	default:
		if *killAfter > 0 {
			fmt.Fprintln(os.Stderr, "clusterup: the command ended before the kill")
		}
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return fail(err)
	}
	return 0
}

func fail(err error) int {
	fmt.Fprintln(os.Stderr, "clusterup:", err)
	return 1
}

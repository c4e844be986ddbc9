//go:build unix

package cluster

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/idemkit/idemkit/internal/dtmserver"
)

// Defaults of [DTMClusterOptions].
const (
	DefaultDTMServers = 2
	// dtmStoreDB is the database of the shared DTM store.
	dtmStoreDB = "dtm"
)

// DTMClusterOptions configure [StartDTMCluster]. The zero value works.
type DTMClusterOptions struct {
	// Servers is the number of DTM servers. Defaults to DefaultDTMServers (2).
	Servers int
	// CronInterval is each server's TRANS_CRON_INTERVAL in seconds: how often it looks for
	// transactions due for a retry, its own or those a dead server left. Defaults to
	// dtmserver.DefaultCronInterval (1).
	CronInterval int
	// Env holds extra KEY=VALUE settings for every server.
	Env []string
	// BuildProgress receives the DTM build's progress when the binary is not cached yet. Defaults
	// to discarding it.
	BuildProgress io.Writer
}

// DTMCluster is DTM in high availability on this machine: a private MariaDB holding DTM's store
// (database "dtm", created from DTM's own schema file), several DTM servers sharing it, and a
// [FailoverProxy] in front of them. Clients use [DTMCluster.URL], the proxy's DTM API base; DTM
// calls the branches directly. Its methods are safe for concurrent use.
type DTMCluster struct {
	store   *MariaNode
	servers []*dtmserver.Server
	logs    []*lockedBuffer
	proxy   *FailoverProxy
}

// StartDTMCluster starts the store, builds the DTM server when it is not cached, starts the servers
// on the store and the proxy in front of them. It returns an error, leaving nothing running, when
// MariaDB is missing or a piece does not start.
func StartDTMCluster(ctx context.Context, opts *DTMClusterOptions) (_ *DTMCluster, err error) {
	var o DTMClusterOptions
	if opts != nil {
		o = *opts
	}
	o.Servers = cmp.Or(o.Servers, DefaultDTMServers)
	if o.Servers < 1 {
		return nil, fmt.Errorf("cluster: DTM needs at least one server, got %d", o.Servers)
	}
	bin, err := dtmserver.Build(ctx, o.BuildProgress)
	if err != nil {
		return nil, err
	}
	d := &DTMCluster{}
	defer func() {
		if err != nil {
			d.Stop()
		}
	}()
	if d.store, err = StartMariaDB(ctx); err != nil {
		return nil, err
	}
	if err := dtmserver.CreateMySQLStore(ctx, d.store.DSN(""), dtmStoreDB); err != nil {
		return nil, err
	}
	var bases []string
	for range o.Servers {
		logs := &lockedBuffer{max: 256 << 10}
		s, err := dtmserver.Start(ctx, &dtmserver.Options{
			Binary:       bin,
			Log:          logs,
			CronInterval: o.CronInterval,
			Env:          o.Env,
			MySQL:        &dtmserver.MySQLStore{Host: "127.0.0.1", Port: d.store.Port(), User: "root", DB: dtmStoreDB},
		})
		if err != nil {
			return nil, err
		}
		d.servers = append(d.servers, s)
		d.logs = append(d.logs, logs)
		bases = append(bases, "http://127.0.0.1:"+strconv.Itoa(s.HTTPPort()))
	}
	if d.proxy, err = StartFailoverProxy(bases); err != nil {
		return nil, err
	}
	return d, nil
}

// URL returns the DTM HTTP API base through the failover proxy, like
// http://127.0.0.1:PORT/api/dtmsvr: what initiators and status clients take as their server.
func (d *DTMCluster) URL() string { return d.proxy.URL() + "/api/dtmsvr" }

// Servers returns the DTM servers, in start order.
func (d *DTMCluster) Servers() []*dtmserver.Server {
	return append([]*dtmserver.Server(nil), d.servers...)
}

// Proxy returns the failover proxy.
func (d *DTMCluster) Proxy() *FailoverProxy { return d.proxy }

// Store returns the MariaDB holding DTM's store.
func (d *DTMCluster) Store() *MariaNode { return d.store }

// StoreDSN returns a go-sql-driver DSN of DTM's store database, for checks.
func (d *DTMCluster) StoreDSN() string { return d.store.DSN(dtmStoreDB) }

// Log returns the tail of server i's output.
func (d *DTMCluster) Log(i int) string { return d.logs[i].String() }

// Logs returns the tail of every server's output, each under a header.
func (d *DTMCluster) Logs() string {
	var b strings.Builder
	for i, s := range d.servers {
		fmt.Fprintf(&b, "--- DTM server %d (%s) ---\n%s\n", i, s.URL(), d.logs[i].String())
	}
	return b.String()
}

// Stop stops the proxy, the servers and the store.
func (d *DTMCluster) Stop() {
	if d.proxy != nil {
		_ = d.proxy.Close()
	}
	for _, s := range d.servers {
		_ = s.Stop()
	}
	if d.store != nil {
		d.store.Stop()
	}
}

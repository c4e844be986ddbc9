package record

import (
	"bufio"
	"database/sql"
	"encoding/binary"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	gormmysql "gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/idemkit/idemkit/internal/testsvc"
)

// faultProxy forwards loopback TCP connections to a database server and plays the faults a test asks
// for, without touching the shared server: a server that stops answering (Freeze: no byte goes either
// way, every connection stays open), or a reply rewritten on its way back (reply).
type faultProxy struct {
	ln     net.Listener
	target string
	// reply, when set, copies a connection's stream from the server to the client in place of
	// io.Copy; returning cuts the connection.
	reply func(dst io.Writer, src *bufio.Reader)

	mu     sync.Mutex
	thawed *sync.Cond // broadcast when frozen is cleared or the proxy closes
	frozen bool
	closed bool
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

// startFaultProxy listens on a free loopback port and forwards to target until t ends.
func startFaultProxy(t testing.TB, target string, reply func(dst io.Writer, src *bufio.Reader)) *faultProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	p := &faultProxy{ln: ln, target: target, reply: reply, conns: make(map[net.Conn]struct{})}
	p.thawed = sync.NewCond(&p.mu)
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(p.close)
	return p
}

// Addr is the proxy's address.
func (p *faultProxy) Addr() string { return p.ln.Addr().String() }

// Freeze stops every byte in either direction, on open connections and new ones, until Thaw: a
// server (or network) that went silent.
func (p *faultProxy) Freeze() { p.setFrozen(true) }

// Drop closes every open connection, the bytes held in them lost, and lets bytes through again: a
// server that answers again after its silent connections were dropped.
func (p *faultProxy) Drop() {
	p.mu.Lock()
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.setFrozen(false)
}

func (p *faultProxy) setFrozen(v bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.frozen = v
	p.thawed.Broadcast()
}

// gate waits while the proxy is frozen, and reports whether it is still open.
func (p *faultProxy) gate() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.frozen && !p.closed {
		p.thawed.Wait()
	}
	return !p.closed
}

// gated is a writer that holds every write while the proxy is frozen.
type gated struct {
	p *faultProxy
	w io.Writer
}

func (g gated) Write(b []byte) (int, error) {
	if !g.p.gate() {
		return 0, net.ErrClosed
	}
	return g.w.Write(b)
}

func (p *faultProxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *faultProxy) serve() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil || !p.track(client, server) {
			_ = client.Close()
			if server != nil {
				_ = server.Close()
			}
			continue
		}
		end := func() {
			_ = client.Close()
			_ = server.Close()
			p.mu.Lock()
			delete(p.conns, client)
			delete(p.conns, server)
			p.mu.Unlock()
		}
		p.wg.Add(2)
		go func() {
			defer p.wg.Done()
			defer end()
			_, _ = io.Copy(gated{p, server}, client)
		}()
		go func() {
			defer p.wg.Done()
			defer end()
			if p.reply != nil {
				p.reply(gated{p, client}, bufio.NewReader(server))
				return
			}
			_, _ = io.Copy(gated{p, client}, server)
		}()
	}
}

func (p *faultProxy) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	p.closed = true
	p.thawed.Broadcast()
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// proxiedDB opens the test database of backend b (MariaDB with multi-statement packets, or
// PostgreSQL) through p.
func proxiedDB(t *testing.T, b backend, p *faultProxy) *gorm.DB {
	t.Helper()
	b.db(t, nil) // creates the test database, or skips/fails when the service is missing
	var sqlDB *sql.DB
	var dial gorm.Dialector
	switch b.name {
	case multiBackend.name:
		mc, err := gomysql.ParseDSN(testsvc.MySQLDSN() + testsvc.Database + "?timeout=3s")
		must(t, err)
		mc.Addr = p.Addr()
		mc.MultiStatements, mc.InterpolateParams = true, true
		c, err := gomysql.NewConnector(mc)
		must(t, err)
		sqlDB = sql.OpenDB(c)
		dial = gormmysql.New(gormmysql.Config{Conn: sqlDB, DSNConfig: mc})
	case "PostgreSQL":
		pc, err := pgx.ParseConfig(testsvc.PostgresDSN() + " dbname=" + testsvc.Database)
		must(t, err)
		host, port, err := net.SplitHostPort(p.Addr())
		must(t, err)
		n, err := strconv.Atoi(port)
		must(t, err)
		pc.Host, pc.Port, pc.TLSConfig, pc.Fallbacks = host, uint16(n), nil, nil
		sqlDB = stdlib.OpenDB(*pc)
		dial = postgres.New(postgres.Config{Conn: sqlDB})
	default:
		t.Fatalf("no proxied %s", b.name)
	}
	sqlDB.SetMaxOpenConns(maxConns)
	t.Cleanup(func() { _ = sqlDB.Close() })
	db, err := gorm.Open(dial, &gorm.Config{Logger: logger.Discard})
	must(t, err)
	return db
}

// serverAddr is the address of the server of backend b.
func serverAddr(t *testing.T, b backend) string {
	t.Helper()
	if b.name == "PostgreSQL" {
		pc, err := pgx.ParseConfig(testsvc.PostgresDSN())
		must(t, err)
		return net.JoinHostPort(pc.Host, strconv.Itoa(int(pc.Port)))
	}
	mc, err := gomysql.ParseDSN(testsvc.MySQLDSN())
	must(t, err)
	return mc.Addr
}

// killAfterCommit returns a reply filter that, once armed, lets a finish batch commit and then
// answers it as a server that kills the connection right after the commit does: PostgreSQL's FATAL
// 57P01 (admin_shutdown: pg_terminate_backend, or a fast shutdown, caught after the commit, as while
// waiting for a synchronous standby) in place of the ReadyForQuery after a batch's UPDATE, or
// MariaDB's error 1927 (connection killed: KILL CONNECTION caught after the commit) in place of the
// COMMIT's OK after a batch's START TRANSACTION; then it cuts the connection. It disarms itself.
func killAfterCommit(dialect string, armed *atomic.Bool) func(dst io.Writer, src *bufio.Reader) {
	if dialect == dialectPostgres {
		return func(dst io.Writer, src *bufio.Reader) {
			updated := false // the batch's UPDATE completed: its Sync commits it
			for {
				var hdr [5]byte
				if _, err := io.ReadFull(src, hdr[:]); err != nil {
					return
				}
				msg := make([]byte, 5+binary.BigEndian.Uint32(hdr[1:])-4)
				copy(msg, hdr[:])
				if _, err := io.ReadFull(src, msg[5:]); err != nil {
					return
				}
				tag := string(msg[5:])
				switch {
				case hdr[0] == 'C' && strings.HasPrefix(tag, "UPDATE ") && tag != "UPDATE 0\x00" && tag != "UPDATE 1\x00":
					updated = armed.Load()
				case hdr[0] == 'Z' && updated && armed.CompareAndSwap(true, false):
					_, _ = dst.Write(pgFatal("57P01", "terminating connection due to administrator command"))
					return
				}
				if _, err := dst.Write(msg); err != nil {
					return
				}
			}
		}
	}
	return func(dst io.Writer, src *bufio.Reader) {
		inTx := false // a multi-statement transaction's START TRANSACTION answered: its last OK is the COMMIT's
		for {
			var hdr [4]byte
			if _, err := io.ReadFull(src, hdr[:]); err != nil {
				return
			}
			n := int(hdr[0]) | int(hdr[1])<<8 | int(hdr[2])<<16
			pkt := make([]byte, 4+n)
			copy(pkt, hdr[:])
			if _, err := io.ReadFull(src, pkt[4:]); err != nil {
				return
			}
			if flags, ok := okFlags(pkt[4:]); ok && armed.Load() {
				const inTrans, moreResults = 0x0001, 0x0008
				switch {
				case flags&inTrans != 0 && flags&moreResults != 0:
					inTx = true
				case inTx && flags&moreResults == 0 && armed.CompareAndSwap(true, false):
					_, _ = dst.Write(mysqlErr(hdr[3], 1927, "70100", "Connection was killed"))
					return
				}
			}
			if _, err := dst.Write(pkt); err != nil {
				return
			}
		}
	}
}

// pgFatal is a PostgreSQL ErrorResponse of severity FATAL.
func pgFatal(code, text string) []byte {
	var body []byte
	for _, f := range [...]struct {
		k byte
		v string
	}{{'S', "FATAL"}, {'V', "FATAL"}, {'C', code}, {'M', text}} {
		body = append(append(append(body, f.k), f.v...), 0)
	}
	body = append(body, 0)
	msg := []byte{'E', 0, 0, 0, 0}
	binary.BigEndian.PutUint32(msg[1:], uint32(4+len(body)))
	return append(msg, body...)
}

// mysqlErr is a MySQL ERR packet with sequence number seq.
func mysqlErr(seq byte, number uint16, state, text string) []byte {
	payload := []byte{0xff, byte(number), byte(number >> 8), '#'}
	payload = append(append(payload, state...), text...)
	return append([]byte{byte(len(payload)), byte(len(payload) >> 8), byte(len(payload) >> 16), seq}, payload...)
}

// okFlags returns the status flags of a MySQL OK packet's payload.
func okFlags(p []byte) (uint16, bool) {
	if len(p) < 7 || p[0] != 0x00 {
		return 0, false
	}
	i := 1
	for range 2 { // affected rows, last insert id: length-encoded integers
		switch b := p[i]; {
		case b < 0xfb:
			i++
		case b == 0xfc:
			i += 3
		case b == 0xfd:
			i += 4
		default:
			i += 9
		}
		if i >= len(p) {
			return 0, false
		}
	}
	if i+2 > len(p) {
		return 0, false
	}
	return binary.LittleEndian.Uint16(p[i:]), true
}

package chaosdtmmsg

import (
	"bytes"
	"encoding/json"
	"io"
	"log"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
)

// proxy forwards a child's calls to DTM; for children marked to die after their local commit it holds
// the submit (which follows the commit) and reports the child, never forwarding it.
type proxy struct {
	target *url.URL
	rp     *httputil.ReverseProxy
	held   chan string // ids of children whose submit is held

	mu       sync.Mutex
	hold     map[string]bool
	prepared []string // gids of every message a child prepared (or tried to)
}

// preparedGIDs returns the gids of the prepare calls seen so far.
func (p *proxy) preparedGIDs() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.prepared...)
}

func newProxy(dtm string) (*proxy, error) {
	u, err := url.Parse(dtm)
	if err != nil {
		return nil, err
	}
	u.Path = ""
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.ErrorLog = log.New(io.Discard, "", 0) // killed children cancel their requests: expected
	return &proxy{target: u, rp: rp, held: make(chan string, 64), hold: map[string]bool{}}, nil
}

func (p *proxy) setHold(id string, on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if on {
		p.hold[id] = true
	} else {
		delete(p.hold, id)
	}
}

// ServeHTTP serves /c/<child id>/<DTM path>.
func (p *proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rest, ok := strings.CutPrefix(r.URL.Path, "/c/")
	id, path, ok2 := strings.Cut(rest, "/")
	if !ok || !ok2 {
		http.Error(w, "bad path", http.StatusNotFound)
		return
	}
	p.mu.Lock()
	hold := p.hold[id]
	p.mu.Unlock()
	if hold && strings.HasSuffix(path, "/submit") {
		p.held <- id
		<-r.Context().Done() // the child is killed while it waits
		return
	}
	if strings.HasSuffix(path, "/prepare") {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var t struct {
			Gid string `json:"gid"`
		}
		if json.Unmarshal(body, &t) == nil && t.Gid != "" {
			p.mu.Lock()
			p.prepared = append(p.prepared, t.Gid)
			p.mu.Unlock()
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
	}
	r.URL.Path = "/" + path
	r.URL.RawPath = ""
	p.rp.ServeHTTP(w, r)
}

package main

import (
	"strings"
	"testing"
	"time"
)

// TestDTMChildExitEndsTheServices: when the DTM child process dies on its own (a crash, the OOM
// killer), the services cannot start or settle any order: every order is answered 503 while /healthz
// says ok, and nothing starts DTM again. Done delivers an error naming the DTM server, so that serve
// exits 1 and a supervisor restarts it on the same data directory, which resumes DTM's transactions
// (found by a defect hunt).
func TestDTMChildExitEndsTheServices(t *testing.T) {
	needDTM(t)
	cfg := testConfig()
	cfg.DataDir = t.TempDir()
	svc := startServices(t, cfg)
	if svc.dtm.child == nil {
		t.Fatal("the services did not start a DTM child process")
	}
	select {
	case err := <-svc.Done():
		t.Fatalf("Done delivered %v before anything happened", err)
	default:
	}

	_ = svc.dtm.child.Kill() // as a crash would: SIGKILL
	select {
	case err := <-svc.Done():
		if err == nil || !strings.Contains(err.Error(), "DTM") {
			t.Errorf("Done delivered %v, not an error naming the DTM server", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the DTM child process died and Done delivered nothing: serve would keep running, answering 503 to every order")
	}
}

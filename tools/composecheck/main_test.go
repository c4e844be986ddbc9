package main

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRepositoryFileIsValid: idemkit's docker-compose.yml passes every check.
func TestRepositoryFileIsValid(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(nil, &out, &errb); code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out.String(), errb.String())
	}
	for _, svc := range []string{"prometheus", "grafana", "example"} {
		if !strings.Contains(out.String(), svc) {
			t.Fatalf("summary lacks %s:\n%s", svc, out.String())
		}
	}
}

// copyTree copies the compose file and what it mounts or builds into a temporary directory and
// returns it.
func copyTree(t *testing.T) string {
	t.Helper()
	dst := t.TempDir()
	root := "../.."
	copyFile := func(rel string) {
		b, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dst, rel)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, rel), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	copyFile("docker-compose.yml")
	copyFile("examples/order-pay-inventory/Dockerfile")
	err := filepath.WalkDir(filepath.Join(root, "deploy"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		copyFile(rel)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

func edit(t *testing.T, file, old, new string) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte(old)) {
		t.Fatalf("%s has no %q", file, old)
	}
	if err := os.WriteFile(file, bytes.Replace(b, []byte(old), []byte(new), 1), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestBrokenMonitoringIsCaught: each way of breaking the Prometheus and Grafana wiring is reported.
func TestBrokenWiringIsCaught(t *testing.T) {
	cases := []struct {
		name  string
		file  string // relative to the copy
		old   string
		new   string
		wants string
	}{
		{"scrape target not a service", "deploy/prometheus/prometheus.yml", `"example:8080"`, `"exampel:8080"`, `"exampel" is not a service`},
		{"scrape target on a wrong port", "deploy/prometheus/prometheus.yml", `"example:8080"`, `"example:9999"`, "publishes or exposes no port 9999"},
		{"nothing scraped", "deploy/prometheus/prometheus.yml", `      - targets: ["example:8080"]`, `      - targets: []`, "scrapes nothing"},
		{"config not mounted", "docker-compose.yml", `:/etc/prometheus/prometheus.yml:ro`, `:/etc/prometheus/other.yml:ro`, "is not mounted"},
		{"missing mount source", "docker-compose.yml", `./deploy/prometheus/prometheus.yml:`, `./deploy/prometheus/missing.yml:`, "bind mount source"},
		{"data source elsewhere", "deploy/grafana/provisioning/datasources/prometheus.yml", `http://prometheus:9090`, `http://prometheus:9091`, "no port 9091"},
		{"dashboard not where the provider looks", "deploy/grafana/provisioning/dashboards/idemkit.yml", `path: /var/lib/grafana/dashboards`, `path: /var/lib/grafana/other`, "no dashboard is mounted"},
		{"dashboard with an unknown data source", "deploy/grafana/idemkit.json", `"uid": "${datasource}"`, `"uid": "nope"`, `data source "nope"`},
		{"dashboard not JSON", "deploy/grafana/idemkit.json", `{`, `{{`, "dashboard"},
		{"no Grafana", "docker-compose.yml", `image: grafana/grafana:11.6.0`, `image: example/other:1`, "no Grafana service"},
		{"DTM's boltdb store in the container", "docker-compose.yml", `      - dtm-data:/var/lib/dtm`, `      - dtm-data:/var/lib/other`, "not on a volume"},
		{"DTM without a working directory", "docker-compose.yml", `    working_dir: /var/lib/dtm`, ``, "working directory"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := copyTree(t)
			edit(t, filepath.Join(dir, c.file), c.old, c.new)
			var out, errb bytes.Buffer
			code := run([]string{filepath.Join(dir, "docker-compose.yml")}, &out, &errb)
			if code != 1 || !strings.Contains(errb.String(), c.wants) {
				t.Fatalf("exit %d, want 1 with %q:\n%s%s", code, c.wants, out.String(), errb.String())
			}
		})
	}
	// The unbroken copy passes: the failures above come from the edits.
	var out, errb bytes.Buffer
	if code := run([]string{filepath.Join(copyTree(t), "docker-compose.yml")}, &out, &errb); code != 0 {
		t.Fatalf("the unbroken copy: exit %d\n%s", code, errb.String())
	}
}

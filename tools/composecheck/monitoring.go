package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/compose-spec/compose-go/v2/types"
	"go.yaml.in/yaml/v3"
)

// Images of the monitoring services.
const (
	prometheusImage = "prom/prometheus"
	grafanaImage    = "grafana/grafana"
)

// checkMounts checks that every bind mount's source exists: Docker would create a missing one as an
// empty directory, and a config file mounted from it would silently be a directory.
func checkMounts(p *types.Project) error {
	var errs []error
	for _, name := range sortedNames(p) {
		for _, v := range p.Services[name].Volumes {
			if v.Type != types.VolumeTypeBind {
				continue
			}
			if _, err := os.Stat(v.Source); err != nil {
				errs = append(errs, fmt.Errorf("service %q: bind mount source %s: %w", name, v.Source, err))
			}
		}
	}
	return errors.Join(errs...)
}

// checkMonitoring checks the Prometheus and Grafana services: Prometheus's configuration is mounted
// and scrapes compose services on ports they listen on; Grafana's provisioning is mounted, its data
// sources point at compose services, and its dashboards are mounted where its provider looks, parse,
// and use only provisioned data sources (or a data source variable of their type).
func checkMonitoring(p *types.Project) error {
	var errs []error
	var prom, graf []string
	for _, name := range sortedNames(p) {
		img := imageName(p.Services[name].Image)
		switch img {
		case prometheusImage:
			prom = append(prom, name)
			errs = append(errs, checkPrometheus(p, name))
		case grafanaImage:
			graf = append(graf, name)
			errs = append(errs, checkGrafana(p, name))
		}
	}
	if len(prom) == 0 {
		errs = append(errs, fmt.Errorf("no Prometheus service (image %s)", prometheusImage))
	}
	if len(graf) == 0 {
		errs = append(errs, fmt.Errorf("no Grafana service (image %s)", grafanaImage))
	}
	return errors.Join(errs...)
}

func sortedNames(p *types.Project) []string {
	names := p.ServiceNames()
	sort.Strings(names)
	return names
}

// imageName strips the registry tag: "prom/prometheus:v3.5.0" -> "prom/prometheus".
func imageName(image string) string {
	if i := strings.LastIndex(image, ":"); i > strings.LastIndex(image, "/") {
		image = image[:i]
	}
	return image
}

// hostPath returns the host path mounted at a container path (through the bind mount with the
// longest matching target).
func hostPath(s types.ServiceConfig, container string) (string, bool) {
	best, src := "", ""
	for _, v := range s.Volumes {
		if v.Type != types.VolumeTypeBind {
			continue
		}
		t := path.Clean(v.Target)
		switch {
		case container == t:
		case strings.HasPrefix(container, t+"/"):
		default:
			continue
		}
		if len(t) > len(best) {
			best, src = t, filepath.Join(v.Source, strings.TrimPrefix(container, t))
		}
	}
	return src, best != ""
}

// mountedFiles returns the host files visible in a container directory: files mounted into it and
// the files of a directory mounted at it or above it.
func mountedFiles(s types.ServiceConfig, dir string) []string {
	var out []string
	if src, ok := hostPath(s, dir); ok {
		if entries, err := os.ReadDir(src); err == nil {
			for _, e := range entries {
				if !e.IsDir() {
					out = append(out, filepath.Join(src, e.Name()))
				}
			}
		}
	}
	for _, v := range s.Volumes {
		if v.Type == types.VolumeTypeBind && path.Dir(path.Clean(v.Target)) == dir {
			if st, err := os.Stat(v.Source); err == nil && !st.IsDir() && !slices.Contains(out, v.Source) {
				out = append(out, v.Source)
			}
		}
	}
	sort.Strings(out)
	return out
}

// listens reports whether service name listens on port: a published or exposed container port.
func listens(p *types.Project, name string, port int) (bool, error) {
	s, ok := p.Services[name]
	if !ok {
		return false, fmt.Errorf("%q is not a service of the project", name)
	}
	for _, pc := range s.Ports {
		if int(pc.Target) == port {
			return true, nil
		}
	}
	for _, e := range s.Expose {
		if e == strconv.Itoa(port) {
			return true, nil
		}
	}
	return false, nil
}

// checkTarget checks a host:port reached on the compose network.
func checkTarget(p *types.Project, hostport string) error {
	host, portS, err := net.SplitHostPort(hostport)
	if err != nil {
		return fmt.Errorf("%q: %w", hostport, err)
	}
	port, err := strconv.Atoi(portS)
	if err != nil {
		return fmt.Errorf("%q: bad port", hostport)
	}
	ok, err := listens(p, host, port)
	if err != nil {
		return fmt.Errorf("%q: %w", hostport, err)
	}
	if !ok {
		return fmt.Errorf("%q: service %q publishes or exposes no port %d", hostport, host, port)
	}
	return nil
}

func checkPrometheus(p *types.Project, name string) error {
	s := p.Services[name]
	config := "/etc/prometheus/prometheus.yml"
	for _, arg := range s.Command {
		if v, ok := strings.CutPrefix(arg, "--config.file="); ok {
			config = v
		}
	}
	src, ok := hostPath(s, config)
	if !ok {
		return fmt.Errorf("service %q: its configuration %s is not mounted from the repository", name, config)
	}
	b, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("service %q: %w", name, err)
	}
	var cfg struct {
		ScrapeConfigs []struct {
			JobName       string `yaml:"job_name"`
			MetricsPath   string `yaml:"metrics_path"`
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		return fmt.Errorf("service %q: %s: %w", name, src, err)
	}
	var errs []error
	targets := 0
	for _, sc := range cfg.ScrapeConfigs {
		if sc.JobName == "" {
			errs = append(errs, fmt.Errorf("service %q: %s: a scrape config without job_name", name, src))
		}
		for _, st := range sc.StaticConfigs {
			for _, t := range st.Targets {
				targets++
				if err := checkTarget(p, t); err != nil {
					errs = append(errs, fmt.Errorf("service %q: %s: job %q: scrape target %w", name, src, sc.JobName, err))
				}
			}
		}
	}
	if targets == 0 {
		errs = append(errs, fmt.Errorf("service %q: %s scrapes nothing", name, src))
	}
	return errors.Join(errs...)
}

func checkGrafana(p *types.Project, name string) error {
	s := p.Services[name]
	const prov = "/etc/grafana/provisioning"
	if _, ok := hostPath(s, prov); !ok {
		return fmt.Errorf("service %q: %s is not mounted from the repository", name, prov)
	}
	var errs []error

	// Data sources: URLs on the compose network, and the uid and type of each.
	uids := map[string]string{} // uid -> type
	types_ := map[string]bool{}
	for _, f := range mountedFiles(s, prov+"/datasources") {
		var cfg struct {
			Datasources []struct {
				Name string `yaml:"name"`
				UID  string `yaml:"uid"`
				Type string `yaml:"type"`
				URL  string `yaml:"url"`
			} `yaml:"datasources"`
		}
		if err := readYAML(f, &cfg); err != nil {
			errs = append(errs, fmt.Errorf("service %q: %w", name, err))
			continue
		}
		for _, ds := range cfg.Datasources {
			uids[ds.UID] = ds.Type
			types_[ds.Type] = true
			u, err := url.Parse(ds.URL)
			if err != nil || u.Host == "" {
				errs = append(errs, fmt.Errorf("service %q: %s: data source %q: bad url %q", name, f, ds.Name, ds.URL))
				continue
			}
			if err := checkTarget(p, u.Host); err != nil {
				errs = append(errs, fmt.Errorf("service %q: %s: data source %q: url %w", name, f, ds.Name, err))
			}
		}
	}
	if len(uids) == 0 {
		errs = append(errs, fmt.Errorf("service %q: no data source provisioned in %s/datasources", name, prov))
	}

	// Dashboard providers: each path holds mounted dashboards that use provisioned data sources.
	dashboards := 0
	for _, f := range mountedFiles(s, prov+"/dashboards") {
		var cfg struct {
			Providers []struct {
				Name    string `yaml:"name"`
				Options struct {
					Path string `yaml:"path"`
				} `yaml:"options"`
			} `yaml:"providers"`
		}
		if err := readYAML(f, &cfg); err != nil {
			errs = append(errs, fmt.Errorf("service %q: %w", name, err))
			continue
		}
		for _, pr := range cfg.Providers {
			var found []string
			for _, d := range mountedFiles(s, path.Clean(pr.Options.Path)) {
				if strings.HasSuffix(d, ".json") {
					found = append(found, d)
				}
			}
			if len(found) == 0 {
				errs = append(errs, fmt.Errorf("service %q: %s: provider %q: no dashboard is mounted at %s", name, f, pr.Name, pr.Options.Path))
			}
			for _, d := range found {
				dashboards++
				if err := checkDashboard(d, uids, types_); err != nil {
					errs = append(errs, fmt.Errorf("service %q: %w", name, err))
				}
			}
		}
	}
	if dashboards == 0 {
		errs = append(errs, fmt.Errorf("service %q: no dashboard provisioned", name))
	}
	if home := s.Environment["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]; home != nil {
		if src, ok := hostPath(s, *home); !ok {
			errs = append(errs, fmt.Errorf("service %q: home dashboard %s is not mounted", name, *home))
		} else if _, err := os.Stat(src); err != nil {
			errs = append(errs, fmt.Errorf("service %q: home dashboard: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

func readYAML(file string, v any) error {
	b, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	return nil
}

// checkDashboard parses a dashboard and checks every data source it names: a provisioned uid, or a
// variable of type datasource whose plugin type is provisioned.
func checkDashboard(file string, uids map[string]string, dsTypes map[string]bool) error {
	b, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	var d struct {
		UID        string            `json:"uid"`
		Title      string            `json:"title"`
		Panels     []json.RawMessage `json:"panels"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Type  string `json:"type"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		return fmt.Errorf("dashboard %s: %w", file, err)
	}
	if d.UID == "" || d.Title == "" || len(d.Panels) == 0 {
		return fmt.Errorf("dashboard %s: needs a uid, a title and panels", file)
	}
	vars := map[string]string{} // datasource variable -> plugin type
	for _, v := range d.Templating.List {
		if v.Type == "datasource" {
			q, _ := v.Query.(string)
			vars[v.Name] = q
			if !dsTypes[q] {
				return fmt.Errorf("dashboard %s: data source variable %q of type %q, but no such data source is provisioned", file, v.Name, q)
			}
		}
	}
	var errs []error
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if ds, ok := v["datasource"].(map[string]any); ok {
				uid, _ := ds["uid"].(string)
				name := strings.TrimSuffix(strings.TrimPrefix(uid, "${"), "}")
				_, isVar := vars[name]
				_, isUID := uids[uid]
				if !isVar && !isUID {
					errs = append(errs, fmt.Errorf("dashboard %s: data source %q is neither provisioned nor a data source variable", file, uid))
				}
			}
			for _, c := range v {
				walk(c)
			}
		case []any:
			for _, c := range v {
				walk(c)
			}
		}
	}
	var all any
	_ = json.Unmarshal(b, &all)
	walk(all)
	return errors.Join(errs...)
}

// Command composecheck validates idemkit's docker-compose.yml the way `docker compose config` does, for
// machines without Docker: it loads the file with the Compose Specification's reference library
// (github.com/compose-spec/compose-go/v2, which the Docker Compose CLI uses) with its normal
// interpolation, schema validation, normalisation and consistency checks, then checks what `docker
// compose config` does not look at: every build context and Dockerfile exists, every bind mount's
// source exists, Prometheus's mounted configuration scrapes compose services on ports they listen on,
// and Grafana's mounted provisioning points its data sources at compose services and loads parseable
// dashboards that use only provisioned data sources (see monitoring.go).
//
//	cd tools/composecheck && go run .                 # checks ../../docker-compose.yml
//	go run . -print                                   # and prints the resolved model, like `docker compose config`
//	go run . path/to/compose.yml
//
// It exits 0 when the file is valid, 1 with the errors otherwise, 2 on bad usage. It lives in a module
// of its own so idemkit's module does not depend on compose-go.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
)

// defaultFile is the compose file checked when no argument is given, relative to this directory.
const defaultFile = "../../docker-compose.yml"

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("composecheck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	printModel := fs.Bool("print", false, "print the resolved model (as `docker compose config` does)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: composecheck [-print] [compose file (default %s)]\n", defaultFile)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 1 {
		fs.Usage()
		return 2
	}
	file := defaultFile
	if fs.NArg() == 1 {
		file = fs.Arg(0)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := load(ctx, file)
	if err == nil {
		err = errors.Join(checkBuilds(p), checkMounts(p), checkMonitoring(p), checkDTMStore(p))
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: invalid: %v\n", file, err)
		return 1
	}
	if *printModel {
		b, err := p.MarshalYAML()
		if err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", file, err)
			return 1
		}
		_, _ = stdout.Write(b)
		return 0
	}
	fmt.Fprintf(stdout, "%s: valid compose project %q\n", file, p.Name)
	for _, line := range summary(p) {
		fmt.Fprintln(stdout, "  "+line)
	}
	return 0
}

// load reads file as `docker compose -f file config` would: the environment and a .env file next to
// it are used for interpolation, and the default validation and consistency checks run.
func load(ctx context.Context, file string) (*types.Project, error) {
	abs, err := filepath.Abs(file)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(abs); err != nil {
		return nil, err
	}
	opts, err := cli.NewProjectOptions([]string{abs},
		cli.WithWorkingDirectory(filepath.Dir(abs)),
		cli.WithOsEnv,
		cli.WithDotEnv,
		cli.WithResolvedPaths(true),
	)
	if err != nil {
		return nil, err
	}
	return opts.LoadProject(ctx)
}

// checkBuilds checks that every build context is a directory holding its Dockerfile: `docker compose
// config` does not look, `docker compose build` fails on it.
func checkBuilds(p *types.Project) error {
	var errs []error
	for _, name := range p.ServiceNames() {
		s := p.Services[name]
		if s.Build == nil || s.Build.DockerfileInline != "" {
			continue
		}
		ctxDir := s.Build.Context
		if strings.Contains(ctxDir, "://") {
			continue // a remote context
		}
		if st, err := os.Stat(ctxDir); err != nil || !st.IsDir() {
			errs = append(errs, fmt.Errorf("service %q: build context %s is not a directory", name, ctxDir))
			continue
		}
		df := s.Build.Dockerfile
		if df == "" {
			df = "Dockerfile"
		}
		if !filepath.IsAbs(df) {
			df = filepath.Join(ctxDir, df)
		}
		if st, err := os.Stat(df); err != nil || st.IsDir() {
			errs = append(errs, fmt.Errorf("service %q: Dockerfile %s not found", name, df))
		}
	}
	return errors.Join(errs...)
}

// summary describes each service in one line: image or build, published ports, dependencies.
func summary(p *types.Project) []string {
	names := p.ServiceNames()
	sort.Strings(names)
	var out []string
	for _, name := range names {
		s := p.Services[name]
		what := "image " + s.Image
		if s.Build != nil {
			what = "build " + s.Build.Dockerfile
		}
		var ports []string
		for _, pc := range s.Ports {
			ports = append(ports, fmt.Sprintf("%s:%s->%d", pc.HostIP, pc.Published, pc.Target))
		}
		var deps []string
		for d, dep := range s.DependsOn {
			deps = append(deps, d+" ("+dep.Condition+")")
		}
		sort.Strings(deps)
		line := fmt.Sprintf("%-8s %s", name, what)
		if len(ports) > 0 {
			line += ", ports " + strings.Join(ports, " ")
		}
		if len(deps) > 0 {
			line += ", after " + strings.Join(deps, ", ")
		}
		out = append(out, line)
	}
	return out
}

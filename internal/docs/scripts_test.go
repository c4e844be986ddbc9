package docs

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestBenchScriptUsage runs ./scripts/bench.sh the way a newcomer asks it what it does (--help, -h,
// help) and with an argument it does not know: it must answer with its usage at once, before it
// brings up the services (which may install packages with apt-get) or builds the benchmark. The
// script runs from a copy of scripts/ whose services.sh only records that it was called.
func TestBenchScriptUsage(t *testing.T) {
	root := setup(t).root
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	src, err := os.ReadFile(filepath.Join(root, "scripts", "bench.sh"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		arg  string
		exit int
	}{{"--help", 0}, {"-h", 0}, {"help", 0}, {"--bogus", 2}} {
		t.Run(c.arg, func(t *testing.T) {
			out, code, broughtUp := runScript(t, "bench.sh", src, false, c.arg)
			if broughtUp {
				t.Errorf("bench.sh %s brought up the services before answering", c.arg)
			}
			if code != c.exit {
				t.Errorf("bench.sh %s exited %d, want %d; output:\n%s", c.arg, code, c.exit, out)
			}
			for _, want := range []string{"./scripts/bench.sh quick", "./scripts/bench.sh -- FLAGS"} {
				if !strings.Contains(out, want) {
					t.Errorf("bench.sh %s: the output does not show %q:\n%s", c.arg, want, out)
				}
			}
		})
	}
}

// TestScriptsHelp asks each script of scripts/ for help (-h, --help), run as ./<name> from scripts/
// itself and as scripts/<name> from the repository root: it must print its usage, whose lines name
// it, and exit 0 at once, before bringing up the services (a services.sh that only records the call).
// An argument a script does not take (test.sh takes package patterns) is refused with exit 2, saying
// so, nothing brought up.
func TestScriptsHelp(t *testing.T) {
	root := setup(t).root
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	for _, name := range []string{"test.sh", "soak.sh", "cluster.sh", "bench.sh"} {
		src, err := os.ReadFile(filepath.Join(root, "scripts", name))
		if err != nil {
			t.Fatal(err)
		}
		cases := []struct {
			arg  string
			exit int
		}{{"-h", 0}, {"--help", 0}}
		if name != "test.sh" {
			cases = append(cases, struct {
				arg  string
				exit int
			}{"--bogus", 2})
		}
		for _, c := range cases {
			for _, fromScripts := range []bool{true, false} {
				t.Run(fmt.Sprintf("%s %s from scripts/ %v", name, c.arg, fromScripts), func(t *testing.T) {
					out, code, broughtUp := runScript(t, name, src, fromScripts, c.arg)
					if broughtUp {
						t.Errorf("%s %s brought up the services", name, c.arg)
					}
					if code != c.exit || c.exit == 0 && !strings.Contains(out, "./scripts/"+name) || out == "" {
						t.Errorf("%s %s exited %d, want %d with its usage (or what is wrong); output:\n%s", name, c.arg, code, c.exit, out)
					}
				})
			}
		}
	}
}

// runScript runs the script name (its source src) with arg from a copy of scripts/ whose services.sh
// only records that it was called: as ./name from scripts/ itself when fromScripts, else as
// scripts/name from the copy's root. It returns the output, the exit code and whether the script
// brought up the services.
func runScript(t *testing.T, name string, src []byte, fromScripts bool, arg string) (out string, code int, broughtUp bool) {
	t.Helper()
	dir := t.TempDir()
	scripts := filepath.Join(dir, "scripts")
	marker := filepath.Join(dir, "services-ran")
	if err := os.MkdirAll(scripts, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(scripts, name), src, 0o755); err != nil {
		t.Fatal(err)
	}
	stub := "#!/usr/bin/env bash\ntouch " + marker + "\nexit 1\n"
	if err := os.WriteFile(filepath.Join(scripts, "services.sh"), []byte(stub), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", "scripts/"+name, arg)
	cmd.Dir = dir
	if fromScripts {
		cmd = exec.Command("bash", "./"+name, arg)
		cmd.Dir = scripts
	}
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	err := cmd.Run()
	if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	_, serr := os.Stat(marker)
	return buf.String(), code, serr == nil
}

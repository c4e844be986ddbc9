package modcheck

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestGoModListsOnlyLibraryDependencies: every direct requirement of go.mod is imported by a package
// users import or read (not under internal/ or cmd/: the examples count, they are documentation users
// run) or by its tests.
func TestGoModListsOnlyLibraryDependencies(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	direct := directRequirements(t, filepath.Join(root, "go.mod"))
	if len(direct) == 0 {
		t.Fatal("go.mod has no direct requirements: parsing failed")
	}

	list := exec.Command("go", "list", "-f", "{{.ImportPath}}", "./...")
	list.Dir = root
	out, err := list.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var lib []string
	for _, p := range strings.Fields(string(out)) {
		rel := strings.TrimPrefix(p, "github.com/idemkit/idemkit")
		if strings.HasPrefix(rel, "/internal") || strings.HasPrefix(rel, "/cmd") {
			continue
		}
		lib = append(lib, p)
	}
	deps := exec.Command("go", append([]string{"list", "-deps", "-test", "-f", "{{with .Module}}{{.Path}}{{end}}"}, lib...)...)
	deps.Dir = root
	out, err = deps.Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	used := map[string]bool{}
	for _, m := range strings.Fields(string(out)) {
		used[m] = true
	}
	for _, m := range direct {
		if !used[m] {
			t.Errorf("go.mod requires %s directly, but no library package or test imports it: move the tool that needs it into a module of its own under tools/", m)
		}
	}
}

// directRequirements returns the module paths go.mod requires without "// indirect".
func directRequirements(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var mods []string
	inBlock := false
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "require (":
			inBlock = true
			continue
		case inBlock && line == ")":
			inBlock = false
			continue
		case strings.HasPrefix(line, "require "):
			line = strings.TrimPrefix(line, "require ")
		case !inBlock:
			continue
		}
		if line == "" || strings.HasPrefix(line, "//") || strings.Contains(line, "// indirect") {
			continue
		}
		mods = append(mods, strings.Fields(line)[0])
	}
	return mods
}

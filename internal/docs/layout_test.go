package docs

import (
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestLayoutNamesEveryPackage checks that the README's Layout table names every directory of the
// repository that holds Go code (outside testdata), itself or through a parent directory the table
// names, so a new package cannot be left out of the map a newcomer reads first.
func TestLayoutNamesEveryPackage(t *testing.T) {
	root := setup(t).root
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	named := layoutNames(string(readme))
	if !slices.Contains(named, "record") || !slices.Contains(named, "httpx/redistoken") {
		t.Fatalf("the Layout table names %v: its parsing is broken", named)
	}
	var missing []string
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); p != root && (n == "testdata" || strings.HasPrefix(n, ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		rel, err := filepath.Rel(root, filepath.Dir(p))
		if err != nil {
			return err
		}
		dir := filepath.ToSlash(rel)
		if dir == "." {
			dir = "idemkit"
		}
		if !covered(dir, named) && !slices.Contains(missing, dir) {
			missing = append(missing, dir)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range missing {
		t.Errorf("README.md's Layout table does not name %s (nor a directory above it)", dir)
	}
}

// layoutNames returns the backquoted names in the first column of the README's Layout table.
func layoutNames(readme string) []string {
	_, section, ok := strings.Cut(readme, "\n## Layout\n")
	if !ok {
		return nil
	}
	if i := strings.Index(section, "\n## "); i >= 0 {
		section = section[:i]
	}
	quoted := regexp.MustCompile("`([^`]+)`")
	var names []string
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 3 {
			continue
		}
		for _, m := range quoted.FindAllStringSubmatch(cells[1], -1) {
			names = append(names, strings.TrimSuffix(m[1], "/"))
		}
	}
	return names
}

// covered reports whether dir or a directory above it is among names.
func covered(dir string, names []string) bool {
	for d := dir; d != "."; d = path.Dir(d) {
		if slices.Contains(names, d) {
			return true
		}
	}
	return false
}

package docs

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestSnippets compiles every ```go block of the module's Markdown files. A block that is a
// complete file (it starts with a package clause) is built, with go vet, as a package of its own
// inside the module; any other block must quote a godoc Example function verbatim (up to its
// indentation), and the Example is compiled by go test. In both, an error a function returns may
// not be dropped silently (see droppedErrors). Each failure names the Markdown file and line.
func TestSnippets(t *testing.T) {
	c := setup(t)
	md, err := markdownFiles(c.root)
	if err != nil {
		t.Fatal(err)
	}
	ex, err := exampleFiles(c.root)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"README.md", "docs/DTM.md", "httpx/README.md"} {
		if !slices.Contains(md, want) {
			t.Fatalf("the Markdown files found are %v: %s is missing, the walk is broken", md, want)
		}
	}
	res, err := c.check(md, ex)
	if err != nil {
		t.Fatal(err)
	}
	if res.blocks == 0 {
		t.Fatalf("found no ```go block in %v: the extraction is broken", md)
	}
	for _, p := range res.problems {
		t.Error(p)
	}
	t.Logf("%d ```go blocks in %d Markdown files: %d complete files built, %d quotes of Examples in %d example files",
		res.blocks, len(md), res.programs, res.quotes, len(ex))
}

// TestCheckerCatchesBrokenSnippets runs the checker on testdata/broken, whose README holds one
// snippet of each kind of mistake, and expects each reported at its line.
func TestCheckerCatchesBrokenSnippets(t *testing.T) {
	c := setup(t)
	const dir = "internal/docs/testdata/broken/"
	res, err := c.check([]string{dir + "README.md"}, []string{dir + "example_test.go"})
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		line int
		text string
	}{
		{5, "no function of an example*_test.go file holds it verbatim"},
		{15, "go vet: undefined: undefinedName"},
		{23, "not gofmt-formatted"},
		{26, "the error os.Remove returns is dropped"},
		{27, "the error strconv.Atoi returns is assigned to _"},
		{36, "no Example contains its first line"},
		{48, "the closest is ExampleParse in internal/docs/testdata/broken/example_test.go, whose line 14 differs here"},
		{54, "the error strconv.Atoi returns is assigned to _ and never looked at"},
		{66, "never closed"},
	}
	got := slices.Clone(res.problems)
	for _, w := range want {
		found := false
		for i, p := range got {
			if p.file == dir+"README.md" && p.line == w.line && strings.Contains(p.msg, w.text) {
				got = append(got[:i], got[i+1:]...)
				found = true
				break
			}
		}
		if !found {
			t.Errorf("no problem %q reported at README.md:%d", w.text, w.line)
		}
	}
	for _, p := range got {
		t.Errorf("unexpected problem: %s", p)
	}
	if res.blocks != 7 || res.programs != 2 || res.quotes != 2 {
		t.Errorf("%d blocks, %d complete, %d quotes; want 7, 2 and 2", res.blocks, res.programs, res.quotes)
	}
	if t.Failed() {
		for _, p := range res.problems {
			t.Log(p)
		}
	}
}

func setup(t *testing.T) *checker {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	c, err := newChecker(root)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

package docs

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"go/ast"
	"go/build"
	"go/format"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// problem is something wrong with a snippet, at a line of a Markdown file.
type problem struct {
	file string // relative to the module root
	line int
	msg  string
}

func (p problem) String() string { return fmt.Sprintf("%s:%d: %s", p.file, p.line, p.msg) }

// checker checks the snippets of Markdown files against the module at root.
type checker struct {
	root    string // the module root, absolute
	modPath string
	// scratch is the directory under root in which the complete files are written, each as a
	// package of its own, so that their imports of the module and its dependencies resolve.
	scratch string
}

// program is a complete-file block written as a package of its own.
type program struct {
	block *block
	dir   string // relative to the root, slash-separated
	file  string // absolute path of the generated file
}

// result is what a check found.
type result struct {
	blocks, programs, quotes int
	problems                 []problem
}

func newChecker(root string) (*checker, error) {
	mod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		return nil, err
	}
	m := regexp.MustCompile(`(?m)^module\s+(\S+)`).FindSubmatch(mod)
	if m == nil {
		return nil, errors.New("go.mod has no module line")
	}
	return &checker{root: root, modPath: string(m[1]), scratch: filepath.Join(root, "internal", "docs", "testdata")}, nil
}

// check checks every Go block of the Markdown files md against the Example functions of the
// example files ex (both relative to the root).
func (c *checker) check(md, ex []string) (*result, error) {
	res := &result{}
	examples, err := examplesIn(c.root, ex)
	if err != nil {
		return nil, err
	}
	var blocks []*block
	for _, f := range md {
		bs, probs, err := goBlocks(c.root, f)
		if err != nil {
			return nil, err
		}
		blocks = append(blocks, bs...)
		res.problems = append(res.problems, probs...)
	}
	res.blocks = len(blocks)

	var complete []*block
	var quotes []*quote
	for _, b := range blocks {
		if b.complete() {
			complete = append(complete, b)
			continue
		}
		q, p := findQuote(b, examples)
		if p != nil {
			res.problems = append(res.problems, *p)
			continue
		}
		quotes = append(quotes, q)
	}
	res.programs, res.quotes = len(complete), len(quotes)
	if len(complete)+len(quotes) == 0 {
		return res, nil
	}

	if err := os.MkdirAll(c.scratch, 0o755); err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp(c.scratch, "snippets-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	programs, probs, err := c.writePrograms(tmp, complete)
	if err != nil {
		return nil, err
	}
	res.problems = append(res.problems, probs...)

	vetted, probs, err := c.vet(programs)
	if err != nil {
		return nil, err
	}
	res.problems = append(res.problems, probs...)

	exports, err := c.exports(programs, quotes)
	if err != nil {
		return nil, err
	}
	for _, p := range programs {
		res.problems = append(res.problems, c.checkProgram(p, exports, vetted[p.block])...)
	}
	probs, err = c.checkQuotes(quotes, exports)
	if err != nil {
		return nil, err
	}
	res.problems = append(res.problems, probs...)
	sort.SliceStable(res.problems, func(i, j int) bool {
		a, b := res.problems[i], res.problems[j]
		return a.file < b.file || a.file == b.file && a.line < b.line
	})
	return res, nil
}

// writePrograms writes each complete block to a directory of its own under tmp. A //line
// directive makes every position in the generated file name the Markdown file and line, so the go
// command's messages point at the docs. A block gofmt would change is a problem.
func (c *checker) writePrograms(tmp string, blocks []*block) ([]*program, []problem, error) {
	var out []*program
	var probs []problem
	for i, b := range blocks {
		if formatted, err := format.Source([]byte(b.text())); err == nil && string(formatted) != b.text() {
			got, want := strings.Split(b.text(), "\n"), strings.Split(string(formatted), "\n")
			n := 0
			for n < len(got) && n < len(want) && got[n] == want[n] {
				n++
			}
			probs = append(probs, problem{b.file, b.first() + n, "not gofmt-formatted: gofmt writes this line as " + strconv.Quote(at(want, n))})
		}
		dir := filepath.Join(tmp, fmt.Sprintf("p%d", i+1))
		if err := os.Mkdir(dir, 0o755); err != nil {
			return nil, nil, err
		}
		file := filepath.Join(dir, "snippet.go")
		md := filepath.Join(c.root, filepath.FromSlash(b.file))
		src := fmt.Sprintf("//line %s:%d\n%s", md, b.first(), b.text())
		if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
			return nil, nil, err
		}
		rel, err := filepath.Rel(c.root, dir)
		if err != nil {
			return nil, nil, err
		}
		out = append(out, &program{block: b, dir: filepath.ToSlash(rel), file: file})
	}
	return out, probs, nil
}

func at(lines []string, i int) string {
	if i < len(lines) {
		return lines[i]
	}
	return ""
}

// diagnostic matches a compiler or vet message about a Markdown position.
var diagnostic = regexp.MustCompile(`^(?:vet: )?(.+?\.md):(\d+)(?::\d+)?: (.*)$`)

// vet runs go vet on the programs: it type-checks them as the compiler does and runs vet's
// analyzers. It returns the programs vet complained about and the problems.
func (c *checker) vet(programs []*program) (map[*block]bool, []problem, error) {
	bad := map[*block]bool{}
	if len(programs) == 0 {
		return bad, nil, nil
	}
	args := []string{"vet"}
	for _, p := range programs {
		args = append(args, "./"+p.dir)
	}
	_, stderr, err := c.goCmd(args...)
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		return nil, nil, err
	}
	var probs []problem
	sc := bufio.NewScanner(bytes.NewReader(stderr))
	for sc.Scan() {
		m := diagnostic.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		file := m[1] // the go command shortens paths below its working directory, the root
		if filepath.IsAbs(file) {
			rel, err := filepath.Rel(c.root, file)
			if err != nil {
				return nil, nil, err
			}
			file = rel
		}
		line, _ := strconv.Atoi(m[2])
		file = path.Clean(filepath.ToSlash(file)) // "./README.md" for a file in the root
		probs = append(probs, problem{file, line, "go vet: " + m[3]})
		for _, p := range programs {
			if p.block.file == file && line >= p.block.first() && line < p.block.first()+len(p.block.lines) {
				bad[p.block] = true
			}
		}
	}
	if err != nil && len(probs) == 0 {
		// vet failed without a message about a snippet line: report its output at every block.
		for _, p := range programs {
			probs = append(probs, problem{p.block.file, p.block.fence, "go vet failed: " + strings.TrimSpace(string(stderr))})
			bad[p.block] = true
		}
	}
	return bad, probs, nil
}

// exports builds the programs' dependencies and the quoted Examples' packages with their tests,
// and returns the export data file of each package by import path ("p [q.test]" for a test
// variant).
func (c *checker) exports(programs []*program, quotes []*quote) (map[string]string, error) {
	args := []string{"list", "-e", "-export", "-test", "-deps", "-f", "{{.ImportPath}}\t{{.Export}}"}
	for _, p := range programs {
		args = append(args, "./"+p.dir)
	}
	var dirs []string
	for _, q := range quotes {
		if d := "./" + dirOf(q.ex.file); !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	args = append(args, dirs...)
	stdout, stderr, err := c.goCmd(args...)
	if err != nil {
		return nil, fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, stderr)
	}
	exports := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(stdout))
	for sc.Scan() {
		if path, file, ok := strings.Cut(sc.Text(), "\t"); ok && file != "" {
			exports[path] = file
		}
	}
	return exports, nil
}

// importerFor imports packages from their export data, preferring the variants built for the
// tests of testOf ("" for none).
func importerFor(fset *token.FileSet, exports map[string]string, testOf string) types.Importer {
	return importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		if testOf != "" {
			if f, ok := exports[path+" ["+testOf+".test]"]; ok {
				return os.Open(f)
			}
		}
		f, ok := exports[path]
		if !ok {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(f)
	})
}

// checkProgram type-checks a program and looks for dropped errors in it. Type errors are reported
// only when vet did not already report the program.
func (c *checker) checkProgram(p *program, exports map[string]string, vetted bool) []problem {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, p.file, nil, parser.ParseComments)
	if err != nil {
		if vetted {
			return nil
		}
		return []problem{{p.block.file, p.block.fence, "does not parse: " + err.Error()}}
	}
	info := &types.Info{Types: map[ast.Expr]types.TypeAndValue{}, Uses: map[*ast.Ident]types.Object{}}
	var typeErrs []problem
	conf := types.Config{Importer: importerFor(fset, exports, ""), Error: func(err error) {
		if te, ok := err.(types.Error); ok {
			typeErrs = append(typeErrs, c.at(fset, te.Pos, "does not compile: "+te.Msg))
		}
	}}
	if _, err := conf.Check(c.modPath+"/"+p.dir, fset, []*ast.File{f}, info); err != nil {
		if vetted {
			return nil
		}
		if len(typeErrs) == 0 {
			typeErrs = append(typeErrs, problem{p.block.file, p.block.fence, "does not compile: " + err.Error()})
		}
		return typeErrs
	}
	var probs []problem
	droppedErrors(fset, f, info, 0, 0, func(pos token.Pos, msg string) {
		probs = append(probs, c.at(fset, pos, msg))
	})
	return probs
}

// at is a problem at pos, which a //line directive maps to a Markdown file.
func (c *checker) at(fset *token.FileSet, pos token.Pos, msg string) problem {
	p := fset.Position(pos)
	file := p.Filename
	if rel, err := filepath.Rel(c.root, file); err == nil {
		file = filepath.ToSlash(rel)
	}
	return problem{file, p.Line, msg}
}

// checkQuotes type-checks the packages of the quoted Examples and looks for dropped errors in the
// quoted lines.
func (c *checker) checkQuotes(quotes []*quote, exports map[string]string) ([]problem, error) {
	byFile := map[string][]*quote{}
	var files []string
	for _, q := range quotes {
		if byFile[q.ex.file] == nil {
			files = append(files, q.ex.file)
		}
		byFile[q.ex.file] = append(byFile[q.ex.file], q)
	}
	var probs []problem
	for _, exFile := range files {
		fset := token.NewFileSet()
		astFile, info, err := c.typeCheckExample(fset, exFile, exports)
		if err != nil {
			for _, q := range byFile[exFile] {
				probs = append(probs, problem{q.block.file, q.block.fence, fmt.Sprintf("quotes %s in %s, whose package does not type-check here: %v", q.ex.name, exFile, err)})
			}
			continue
		}
		for _, q := range byFile[exFile] {
			last := q.at + len(q.block.lines) - 1
			droppedErrors(fset, astFile, info, q.at, last, func(pos token.Pos, msg string) {
				line := fset.PositionFor(pos, false).Line
				probs = append(probs, problem{q.block.file, q.block.first() + line - q.at,
					fmt.Sprintf("%s (quoted from %s, %s:%d)", msg, q.ex.name, exFile, line)})
			})
		}
	}
	return probs, nil
}

// typeCheckExample type-checks the package an example file belongs to (the external test package
// or the package with its in-package tests) and returns the file's syntax and type information.
func (c *checker) typeCheckExample(fset *token.FileSet, exFile string, exports map[string]string) (*ast.File, *types.Info, error) {
	dir := filepath.Join(c.root, filepath.FromSlash(dirOf(exFile)))
	bp, err := build.ImportDir(dir, 0)
	if err != nil {
		return nil, nil, err
	}
	importPath := c.modPath
	if d := dirOf(exFile); d != "." {
		importPath += "/" + d
	}
	base := filepath.Base(exFile)
	var names []string
	pkgPath := importPath
	switch {
	case slices.Contains(bp.XTestGoFiles, base):
		names, pkgPath = bp.XTestGoFiles, importPath+"_test"
	case slices.Contains(bp.TestGoFiles, base):
		names = append(slices.Clone(bp.GoFiles), bp.TestGoFiles...)
	default:
		return nil, nil, fmt.Errorf("%s is not a test file of %s for this platform", base, importPath)
	}
	var files []*ast.File
	var target *ast.File
	for _, name := range names {
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.ParseComments)
		if err != nil {
			return nil, nil, err
		}
		files = append(files, f)
		if name == base {
			target = f
		}
	}
	info := &types.Info{Types: map[ast.Expr]types.TypeAndValue{}, Uses: map[*ast.Ident]types.Object{}}
	conf := types.Config{Importer: importerFor(fset, exports, importPath)}
	if _, err := conf.Check(pkgPath, fset, files, info); err != nil {
		return nil, nil, err
	}
	return target, info, nil
}

// goCmd runs the go command in the module root.
func (c *checker) goCmd(args ...string) (stdout, stderr []byte, err error) {
	cmd := exec.Command("go", args...)
	cmd.Dir = c.root
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	return out.Bytes(), errb.Bytes(), err
}

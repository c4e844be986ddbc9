package docs

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strings"
)

// block is a fenced ```go block of a Markdown file.
type block struct {
	file  string   // path relative to the module root, slash-separated
	fence int      // line of the opening fence (1-based)
	lines []string // the content, with the fence's indentation removed
}

// first is the line of the block's first content line.
func (b *block) first() int { return b.fence + 1 }

func (b *block) text() string { return strings.Join(b.lines, "\n") + "\n" }

// complete reports whether the block is a whole Go file: its first line that is neither blank nor
// a comment is a package clause.
func (b *block) complete() bool {
	for _, l := range b.lines {
		t := strings.TrimSpace(l)
		switch {
		case t == "", strings.HasPrefix(t, "//"):
			continue
		case strings.HasPrefix(t, "package "):
			return true
		}
		return false
	}
	return false
}

// goBlocks returns the ```go (or ~~~go, ```golang) blocks of the Markdown file at root/rel. An
// unclosed Go block is a problem.
func goBlocks(root, rel string) ([]*block, []problem, error) {
	data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(rel)))
	if err != nil {
		return nil, nil, err
	}
	var (
		blocks   []*block
		probs    []problem
		cur      *block
		open     string // the opening fence's run of ` or ~; "" outside a fence
		indent   int
		isGo     bool
		lineNo   int
		fenceRun = func(s string) string {
			if len(s) < 3 || (s[0] != '`' && s[0] != '~') {
				return ""
			}
			n := 0
			for n < len(s) && s[n] == s[0] {
				n++
			}
			if n < 3 {
				return ""
			}
			return s[:n]
		}
	)
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		lineNo++
		line := sc.Text()
		trimmed := strings.TrimLeft(line, " \t")
		if open == "" {
			run := fenceRun(trimmed)
			if run == "" {
				continue
			}
			open, indent = run, len(line)-len(trimmed)
			info := strings.Fields(trimmed[len(run):])
			isGo = len(info) > 0 && (info[0] == "go" || info[0] == "golang")
			if isGo {
				cur = &block{file: rel, fence: lineNo}
			}
			continue
		}
		if run := fenceRun(trimmed); run != "" && run[0] == open[0] && len(run) >= len(open) && strings.TrimSpace(trimmed[len(run):]) == "" {
			if isGo {
				blocks = append(blocks, cur)
			}
			open, cur = "", nil
			continue
		}
		if isGo {
			cur.lines = append(cur.lines, dedent(line, indent))
		}
	}
	if err := sc.Err(); err != nil {
		return nil, nil, err
	}
	if open != "" && isGo {
		probs = append(probs, problem{rel, cur.fence, "this ```go block is never closed"})
	}
	return blocks, probs, nil
}

// dedent removes up to n leading spaces (the indentation of a fence inside a list item).
func dedent(line string, n int) string {
	i := 0
	for i < n && i < len(line) && line[i] == ' ' {
		i++
	}
	return line[i:]
}

// markdownFiles lists the Markdown files of the module under root, relative and slash-separated:
// every *.md outside hidden directories, testdata, node_modules and nested modules.
func markdownFiles(root string) ([]string, error) {
	return walkModule(root, func(name string) bool { return strings.HasSuffix(name, ".md") })
}

// walkModule lists the files of the module under root whose name keep accepts, skipping hidden
// directories, testdata, node_modules and directories holding a module of their own.
func walkModule(root string, keep func(name string) bool) ([]string, error) {
	var files []string
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path == root {
				return nil
			}
			if strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "node_modules" {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir // a nested module: its snippets are its own
			}
			return nil
		}
		if keep(name) {
			rel, err := filepath.Rel(root, path)
			if err != nil {
				return err
			}
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	return files, err
}

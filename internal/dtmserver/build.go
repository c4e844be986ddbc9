package dtmserver

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"time"
)

// Version is the DTM server version the build module pins.
const Version = "v1.19.0"

// EnvBinary names the environment variable that points at a ready DTM binary, skipping the build.
const EnvBinary = "IDEMKIT_DTM_BIN"

// EnvCache names the environment variable that overrides the directory holding built binaries
// (default: os.UserCacheDir()/idemkit).
const EnvCache = "IDEMKIT_DTM_CACHE"

// modulePath is the module path of idemkit; buildModuleRel is the build module inside it.
const (
	modulePath     = "github.com/idemkit/idemkit"
	buildModuleRel = "internal/dtmserver/build"
	dtmPackage     = "github.com/dtm-labs/dtm"
)

// progressEvery is how often Build reports that a build is still running.
const progressEvery = 15 * time.Second

// Build returns the path of a DTM server binary, building it when needed.
//
// When IDEMKIT_DTM_BIN is set, Build returns that path after checking it is a file. Otherwise it looks
// for a binary cached under os.UserCacheDir()/idemkit (or IDEMKIT_DTM_CACHE)/dtm-<version>-<hash of the
// build module's go.mod and go.sum>/dtm and, when it is missing, runs `go build github.com/dtm-labs/dtm` in the build module
// (internal/dtmserver/build, found from this source file or by searching upward from the working
// directory for idemkit's go.mod). A cold build takes minutes; Build prints progress lines to progress
// (nil discards them) and stops when ctx ends.
//
// Build is safe to call from several processes at once: builders take a file lock in the cache
// directory (waiting, bounded by ctx, while another process builds) and write to a temporary file that
// is renamed into place, so no process ever sees a partial binary.
func Build(ctx context.Context, progress io.Writer) (string, error) {
	if progress == nil {
		progress = io.Discard
	}
	if p := os.Getenv(EnvBinary); p != "" {
		st, err := os.Stat(p)
		if err != nil {
			return "", fmt.Errorf("dtmserver: %s: %w", EnvBinary, err)
		}
		if st.IsDir() {
			return "", fmt.Errorf("dtmserver: %s=%s is a directory", EnvBinary, p)
		}
		return p, nil
	}
	modDir, err := BuildModuleDir()
	if err != nil {
		return "", err
	}
	cacheDir, err := cacheDirFor(modDir)
	if err != nil {
		return "", err
	}
	bin := filepath.Join(cacheDir, binaryName())
	if isFile(bin) {
		return bin, nil
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return "", fmt.Errorf("dtmserver: creating cache directory: %w", err)
	}
	unlock, err := lockDir(ctx, cacheDir, progress)
	if err != nil {
		return "", err
	}
	defer unlock()
	if isFile(bin) { // another process built it while we waited
		return bin, nil
	}
	if err := goBuild(ctx, modDir, bin, progress); err != nil {
		return "", err
	}
	return bin, nil
}

func binaryName() string {
	if runtime.GOOS == "windows" {
		return "dtm.exe"
	}
	return "dtm"
}

func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

// BuildModuleDir returns the directory of the module that pins the DTM server (internal/dtmserver/build).
// It uses the location of this source file when it is available and otherwise searches upward from the
// working directory for idemkit's go.mod.
func BuildModuleDir() (string, error) {
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		dir := filepath.Join(filepath.Dir(file), "build")
		if isFile(filepath.Join(dir, "go.mod")) {
			return dir, nil
		}
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("dtmserver: locating the build module: %w", err)
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if isIdemkitRoot(dir) {
			p := filepath.Join(dir, filepath.FromSlash(buildModuleRel))
			if isFile(filepath.Join(p, "go.mod")) {
				return p, nil
			}
			return "", fmt.Errorf("dtmserver: %s has no go.mod", p)
		}
		if parent := filepath.Dir(dir); parent == dir {
			break
		}
	}
	return "", fmt.Errorf("dtmserver: cannot find the %s module above %s (set %s to a DTM binary)", modulePath, wd, EnvBinary)
}

var moduleLine = regexp.MustCompile(`(?m)^module\s+(\S+)\s*$`)

func isIdemkitRoot(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return false
	}
	m := moduleLine.FindSubmatch(b)
	return m != nil && string(m[1]) == modulePath
}

// cacheDirFor names the cache directory after the DTM version and a hash of the build module's go.mod and
// go.sum, so a change of pinned versions builds a fresh binary.
func cacheDirFor(modDir string) (string, error) {
	root := os.Getenv(EnvCache)
	if root == "" {
		dir, err := os.UserCacheDir()
		if err != nil {
			dir = os.TempDir()
		}
		root = filepath.Join(dir, "idemkit")
	}
	h := sha256.New()
	for _, name := range []string{"go.mod", "go.sum"} {
		b, err := os.ReadFile(filepath.Join(modDir, name))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("dtmserver: reading build module: %w", err)
		}
		h.Write(b)
		h.Write([]byte{0})
	}
	sum := hex.EncodeToString(h.Sum(nil))[:12]
	return filepath.Join(root, "dtm-"+Version+"-"+sum), nil
}

// goBuild builds the DTM server into a temporary file next to bin and renames it into place.
func goBuild(ctx context.Context, modDir, bin string, progress io.Writer) error {
	goTool, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("dtmserver: the go command is needed to build the DTM server: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(bin), ".dtm-build-*")
	if err != nil {
		return fmt.Errorf("dtmserver: %w", err)
	}
	tmpPath := tmp.Name()
	_ = tmp.Close()
	defer os.Remove(tmpPath) // no-op after a successful rename

	cmd := exec.CommandContext(ctx, goTool, "build", "-o", tmpPath,
		"-ldflags", "-X main.Version="+Version, dtmPackage)
	cmd.Dir = modDir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-buildvcs=false")
	cmd.WaitDelay = 5 * time.Second

	var tail tailBuffer
	pr, pw := io.Pipe()
	cmd.Stdout = pw
	cmd.Stderr = pw
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // forward the go command's own lines (downloads, errors) as progress
		defer wg.Done()
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			line := sc.Text()
			tail.WriteLine(line)
			fmt.Fprintf(progress, "dtmserver: %s\n", line)
		}
		_, _ = io.Copy(io.Discard, pr)
	}()

	start := time.Now()
	fmt.Fprintf(progress, "dtmserver: building DTM server %s in %s (a cold build takes minutes)\n", Version, modDir)
	if err := cmd.Start(); err != nil {
		_ = pw.Close()
		wg.Wait()
		return fmt.Errorf("dtmserver: starting go build: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	ticker := time.NewTicker(progressEvery)
	defer ticker.Stop()
	var werr error
loop:
	for {
		select {
		case werr = <-done:
			break loop
		case <-ticker.C:
			fmt.Fprintf(progress, "dtmserver: still building DTM server (%s elapsed)\n", time.Since(start).Round(time.Second))
		}
	}
	_ = pw.Close()
	wg.Wait()
	if werr != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("dtmserver: building DTM server: %w", errors.Join(ctx.Err(), werr))
		}
		return fmt.Errorf("dtmserver: building DTM server: %w\n%s", werr, tail.String())
	}
	if err := os.Chmod(tmpPath, 0o755); err != nil {
		return fmt.Errorf("dtmserver: %w", err)
	}
	if err := os.Rename(tmpPath, bin); err != nil {
		return fmt.Errorf("dtmserver: installing DTM binary: %w", err)
	}
	fmt.Fprintf(progress, "dtmserver: built %s in %s\n", bin, time.Since(start).Round(time.Second))
	return nil
}

// tailBuffer keeps the last lines written to it, for error messages.
type tailBuffer struct {
	mu    sync.Mutex
	lines []string
}

const tailLines = 40

func (t *tailBuffer) WriteLine(s string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lines = append(t.lines, s)
	if len(t.lines) > tailLines {
		t.lines = t.lines[len(t.lines)-tailLines:]
	}
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var b bytes.Buffer
	for _, l := range t.lines {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	return strings.TrimRight(b.String(), "\n")
}

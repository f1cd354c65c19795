package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The PostgreSQL server programs: where they are, which user runs them, and
// the initdb'ed data directory every cluster copies.

// pgBinaries are the server programs and the user they run as.
type pgBinaries struct {
	dir string // holds initdb, pg_ctl, postgres
	// runuser is set when this process is root: PostgreSQL refuses to run
	// as root, so the programs run as the postgres user.
	runuser  string
	uid, gid int

	pristineOnce sync.Once
	pristine     string // an initdb'ed data directory, copied for each cluster
	pristineErr  error
}

var pgBins struct {
	once sync.Once
	b    *pgBinaries
	err  error
}

func findPGBinaries() (*pgBinaries, error) {
	pgBins.once.Do(func() { pgBins.b, pgBins.err = lookupPGBinaries() })
	return pgBins.b, pgBins.err
}

func lookupPGBinaries() (*pgBinaries, error) {
	var dir string
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		dir = filepath.Dir(p)
	} else {
		// Debian/Ubuntu keep the server programs off PATH.
		matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_ctl")
		matches2, _ := filepath.Glob("/usr/pgsql-*/bin/pg_ctl")
		matches = append(matches, matches2...)
		if len(matches) == 0 {
			return nil, errors.New("pg_ctl not found on PATH nor under /usr/lib/postgresql/*/bin or /usr/pgsql-*/bin")
		}
		slices.SortFunc(matches, func(a, b string) int { return pgMajor(b) - pgMajor(a) }) // newest first
		dir = filepath.Dir(matches[0])
	}
	for _, prog := range []string{"initdb", "pg_ctl", "postgres"} {
		if _, err := os.Stat(filepath.Join(dir, prog)); err != nil {
			return nil, fmt.Errorf("%s not found next to pg_ctl in %s", prog, dir)
		}
	}
	b := &pgBinaries{dir: dir, uid: -1, gid: -1}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("running as root, and PostgreSQL refuses to: no postgres user to run it as (%w); create one (`useradd -r postgres`) or run the tests as another user", err)
		}
		b.uid, _ = strconv.Atoi(u.Uid)
		b.gid, _ = strconv.Atoi(u.Gid)
		if b.runuser, err = exec.LookPath("runuser"); err != nil {
			return nil, errors.New("running as root: runuser not found (util-linux) to run PostgreSQL as the postgres user")
		}
	}
	return b, nil
}

func pgMajor(path string) int {
	// /usr/lib/postgresql/15/bin/pg_ctl or /usr/pgsql-15/bin/pg_ctl
	d := filepath.Base(filepath.Dir(filepath.Dir(path)))
	d = strings.TrimPrefix(d, "pgsql-")
	n, _ := strconv.Atoi(d)
	return n
}

// command is the argv that runs a server program as the right user.
func (b *pgBinaries) command(prog string, args ...string) []string {
	argv := append([]string{filepath.Join(b.dir, prog)}, args...)
	if b.runuser != "" {
		argv = append([]string{b.runuser, "-u", "postgres", "--"}, argv...)
	}
	return argv
}

func (b *pgBinaries) run(prog string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	argv := b.command(prog, args...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = os.TempDir() // the postgres user may not be able to enter the test's directory
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	return out.Bytes(), err
}

func (b *pgBinaries) chown(path string) error {
	if b.uid < 0 {
		return nil
	}
	return filepath.Walk(path, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, b.uid, b.gid)
	})
}

// initdbInto creates a data directory at dst. initdb runs once per binary
// (about a second); later clusters copy its result, which takes a tenth of
// that.
func (b *pgBinaries) initdbInto(dst string) error {
	b.pristineOnce.Do(func() {
		dir, err := os.MkdirTemp("", "testenv-pginit-")
		if err != nil {
			b.pristineErr = err
			return
		}
		unreap := reapOnCrash(reapStep{RemoveAll: dir})
		atTeardown(func() { _ = os.RemoveAll(dir); unreap() })
		if err := b.chown(dir); err != nil {
			b.pristineErr = err
			return
		}
		data := filepath.Join(dir, "data")
		out, err := b.run("initdb", "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync")
		if err != nil {
			b.pristineErr = fmt.Errorf("initdb: %w\n%s", err, out)
			return
		}
		b.pristine = data
	})
	if b.pristineErr != nil {
		return b.pristineErr
	}
	// cp -a keeps the owner (postgres) and the 0700 mode PostgreSQL insists on.
	if out, err := exec.Command("cp", "-a", b.pristine, dst).CombinedOutput(); err != nil {
		return fmt.Errorf("copy data directory: %w\n%s", err, out)
	}
	return nil
}

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/store"
)

func init() {
	register(&command{
		name:    "models",
		summary: "manage the offline model store: import, ls, verify, export, activate, rollback, rm, gc",
		run:     runModels,
	})
}

const modelsUsage = `usage:
  edgeinfer models [--store S] import DIR                  store a bundle, its files checked against its manifest (prints name@version)
  edgeinfer models [--store S] ls                          list stored versions (* active, - previous)
  edgeinfer models [--store S] verify                      re-hash every chunk; exit 1 naming what is corrupt
  edgeinfer models [--store S] export NAME[@VERSION] DIR   write a version out as a bundle directory
  edgeinfer models [--store S] activate NAME@VERSION
  edgeinfer models [--store S] rollback NAME               re-activate the previous version
  edgeinfer models [--store S] rm NAME@VERSION
  edgeinfer models [--store S] gc                          delete chunks no version uses

The store defaults to $EDGEINFER_STORE, else ~/.local/share/edgeinfer/models.db.
Only import creates a store; every other subcommand needs one that exists.

flags:`

// defaultStorePath is $EDGEINFER_STORE or ~/.local/share/edgeinfer/models.db.
func defaultStorePath() string {
	if p := os.Getenv("EDGEINFER_STORE"); p != "" {
		return p
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "models.db"
	}
	return filepath.Join(home, ".local", "share", "edgeinfer", "models.db")
}

func runModels(ctx context.Context, stdout io.Writer, args []string) error {
	fs := newFlagSet("models")
	storePath := fs.String("store", defaultStorePath(), "model store `file`")
	fs.Usage = func() { fmt.Fprintln(fs.Output(), modelsUsage); fs.PrintDefaults() }
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		fs.Usage()
		return fmt.Errorf("%w: missing subcommand", errUsage)
	}
	sub, rest := pos[0], pos[1:]
	want := map[string]int{"import": 1, "ls": 0, "verify": 0, "export": 2, "activate": 1, "rollback": 1, "rm": 1, "gc": 0}
	n, ok := want[sub]
	if !ok {
		return fmt.Errorf("%w: unknown subcommand %q", errUsage, sub)
	}
	if len(rest) != n {
		return fmt.Errorf("%w: models %s takes %d argument(s), got %d", errUsage, sub, n, len(rest))
	}
	if sub == "import" {
		// Checked before the store is opened, which would create it.
		if err := needBundleDir(rest[0]); err != nil {
			return err
		}
	}
	s, err := openStore(ctx, *storePath, sub == "import")
	if err != nil {
		return err
	}
	err = modelsSub(ctx, s, stdout, os.Stderr, sub, rest)
	return errors.Join(err, s.Close())
}

func modelsSub(ctx context.Context, s *store.Store, stdout, stderr io.Writer, sub string, args []string) error {
	switch sub {
	case "import":
		p := newProgress(stderr, "import")
		ref, err := s.Import(ctx, args[0], p.update)
		p.finish(err)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, ref)
	case "ls":
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "\tMODEL\tSIZE\tFILES\tIMPORTED")
		var bad error
		for e, err := range s.List(ctx) {
			if err != nil {
				return err
			}
			mark := " "
			switch {
			case e.Active:
				mark = "*"
			case e.Previous:
				mark = "-"
			}
			if e.Err != nil {
				fmt.Fprintf(tw, "%s\t%s\t?\t?\tdamaged: %v\n", mark, e.Ref, e.Err)
				bad = errors.Join(bad, e.Err)
				continue
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", mark, e.Ref, humanBytes(e.Size), e.Files, e.Imported.Format(time.RFC3339))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		return bad
	case "verify":
		p := newProgress(stderr, "verify")
		rep, err := s.Verify(ctx, p.update)
		p.finish(err)
		for _, d := range rep.Damaged {
			fmt.Fprintln(stdout, "CORRUPT", d)
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "ok: %d versions, %d files, %d chunks, %s re-hashed\n", rep.Versions, rep.Files, rep.Chunks, humanBytes(rep.Bytes))
	case "export":
		ref, err := s.Export(ctx, args[0], args[1])
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s -> %s\n", ref, args[1])
	case "activate":
		if err := s.Activate(ctx, args[0]); err != nil {
			return err
		}
		fmt.Fprintln(stdout, args[0], "active")
	case "rollback":
		ref, err := s.Rollback(ctx, args[0])
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, ref, "active")
	case "rm":
		if err := s.Remove(ctx, args[0]); err != nil {
			return err
		}
		fmt.Fprintln(stdout, "removed", args[0], "(run 'edgeinfer models gc' to free its chunks)")
	case "gc":
		rep, err := s.GC(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "freed %d chunks, %s\n", rep.Chunks, humanBytes(rep.Bytes))
	}
	return nil
}

// progress draws a bar on a terminal and prints a plain line every 10 %
// otherwise (logs, CI). It is used from one goroutine at a time.
type progress struct {
	w       io.Writer
	what    string
	tty     bool
	last    time.Time
	lastTen int64
	drawn   bool
	start   time.Time
	done    int64
	total   int64
}

func newProgress(w io.Writer, what string) *progress {
	p := &progress{w: w, what: what, start: time.Now(), lastTen: -1}
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			p.tty = true
		}
	}
	return p
}

func (p *progress) update(done, total int64) {
	p.done, p.total = done, total
	if total <= 0 {
		return
	}
	if p.tty {
		if time.Since(p.last) < 100*time.Millisecond && done < total {
			return
		}
		p.last = time.Now()
		const width = 30
		fill := int(width * done / total)
		fmt.Fprintf(p.w, "\r%s [%s%s] %3d%% %s/%s", p.what, strings.Repeat("#", fill), strings.Repeat(".", width-fill),
			100*done/total, humanBytes(done), humanBytes(total))
		p.drawn = true
		return
	}
	if ten := 10 * done / total; ten != p.lastTen && total >= 64<<20 {
		p.lastTen = ten
		fmt.Fprintf(p.w, "%s: %d%% %s/%s\n", p.what, 10*ten, humanBytes(done), humanBytes(total))
	}
}

func (p *progress) finish(err error) {
	if p.drawn {
		fmt.Fprintln(p.w)
	}
	if err == nil && p.total >= 64<<20 {
		el := time.Since(p.start)
		fmt.Fprintf(p.w, "%s: %s in %v (%.0f MB/s)\n", p.what, humanBytes(p.done), el.Round(time.Millisecond), float64(p.done)/1e6/el.Seconds())
	}
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// Command testsum reads `go test -json` on its standard input, prints the
// test output as go test would, and ends with what a plain run hides: every
// skipped test grouped by its reason, and a closing count line
// ("N passed, N failed, N skipped"). It exits 1 when a test or package
// failed, or when a skip's reason matches -fail-skips: CI names the tools
// it installs there, so a test that skips for one of them (a broken
// install, a path that moved) fails the run instead of passing in silence.
//
//	go test -json ./... | go run ./pkg/cmd/testsum [-fail-skips REGEXP]
//
// -fail-skips defaults to $TESTSUM_FAIL_SKIPS, which .ci/run sets.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
)

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
}

// skip is one skipped test and the reason it logged.
type skip struct{ pkg, test, reason string }

func main() {
	failSkips := flag.String("fail-skips", os.Getenv("TESTSUM_FAIL_SKIPS"), "fail when a skip's reason matches this regular expression (the tools CI installs; default $TESTSUM_FAIL_SKIPS)")
	flag.Parse()
	var forbid *regexp.Regexp
	if *failSkips != "" {
		var err error
		if forbid, err = regexp.Compile(*failSkips); err != nil {
			fmt.Fprintf(os.Stderr, "testsum: -fail-skips: %v\n", err)
			os.Exit(2)
		}
	}
	s, err := summarise(os.Stdin, os.Stdout)
	if err != nil {
		fmt.Fprintf(os.Stderr, "testsum: %v\n", err)
		os.Exit(2)
	}
	if s.report(os.Stdout, forbid) {
		os.Exit(1)
	}
}

// summary is what the run did.
type summary struct {
	passed, failed int
	failedPkgs     []string
	skips          []skip
}

// summarise copies the run's output to w as go test without -v prints
// it: package results as they arrive, a test's own output only when it
// failed. The tests' lines are held until their verdict.
func summarise(r io.Reader, w io.Writer) (*summary, error) {
	s := &summary{}
	held := map[string][]string{} // package/test → its output so far
	last := map[string]string{}   // package/test → the last line it logged
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if err := json.Unmarshal(line, &e); err != nil || e.Action == "" {
			// Not an event (a build error printed by go itself): pass it on.
			fmt.Fprintf(w, "%s\n", line)
			continue
		}
		key := e.Package + "/" + e.Test
		switch e.Action {
		case "build-output": // a package that did not compile
			io.WriteString(w, e.Output)
		case "output":
			if e.Test == "" {
				if e.Output != "PASS\n" { // go test without -v prints no PASS line
					io.WriteString(w, e.Output)
				}
				continue
			}
			held[key] = append(held[key], e.Output)
			if m := logLine.FindStringSubmatch(strings.TrimRight(e.Output, "\n")); m != nil {
				last[key] = strings.TrimSpace(m[1])
			}
		case "pass":
			if e.Test != "" {
				s.passed++
			}
			delete(held, key)
		case "fail":
			if e.Test == "" {
				s.failedPkgs = append(s.failedPkgs, e.Package)
				continue
			}
			s.failed++
			for _, l := range held[key] {
				if !strings.HasPrefix(l, "=== ") {
					io.WriteString(w, l)
				}
			}
			delete(held, key)
		case "skip":
			if e.Test != "" {
				reason := last[key]
				if reason == "" {
					reason = "(no reason logged)"
				}
				s.skips = append(s.skips, skip{e.Package, e.Test, reason})
			}
			delete(held, key)
		}
	}
	return s, sc.Err()
}

// logLine is a test's t.Log line: "    file_test.go:12: message".
var logLine = regexp.MustCompile(`^\s+\S+\.go:\d+: (.*)$`)

// report prints the skips by reason and the closing line; it reports
// whether the run must fail.
func (s *summary) report(w io.Writer, forbid *regexp.Regexp) (fail bool) {
	byReason := map[string][]skip{}
	for _, k := range s.skips {
		byReason[k.reason] = append(byReason[k.reason], k)
	}
	reasons := make([]string, 0, len(byReason))
	for r := range byReason {
		reasons = append(reasons, r)
	}
	slices.SortFunc(reasons, func(a, b string) int {
		if d := len(byReason[b]) - len(byReason[a]); d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
	var forbidden []skip
	if len(reasons) > 0 {
		fmt.Fprintf(w, "\n== %d skipped tests, by reason\n", len(s.skips))
	}
	for _, r := range reasons {
		ks := byReason[r]
		names := make([]string, 0, 3)
		for _, k := range ks[:min(len(ks), 3)] {
			names = append(names, shortPkg(k.pkg)+"."+k.test)
		}
		more := ""
		if len(ks) > 3 {
			more = fmt.Sprintf(" and %d more", len(ks)-3)
		}
		mark := ""
		if forbid != nil && forbid.MatchString(r) {
			mark = "  <- a tool CI installs"
			forbidden = append(forbidden, ks...)
		}
		fmt.Fprintf(w, "%4d  %s%s\n      %s%s\n", len(ks), r, mark, strings.Join(names, ", "), more)
	}
	if len(s.failedPkgs) > 0 {
		fmt.Fprintf(w, "\n== failed packages: %s\n", strings.Join(s.failedPkgs, ", "))
	}
	if len(forbidden) > 0 {
		fmt.Fprintf(w, "\n== %d tests skipped for a tool this run installed (-fail-skips): the run fails\n", len(forbidden))
	}
	fmt.Fprintf(w, "\n%d passed, %d failed, %d skipped\n", s.passed, s.failed, len(s.skips))
	return s.failed > 0 || len(s.failedPkgs) > 0 || len(forbidden) > 0
}

// shortPkg drops the module path from a package's import path.
func shortPkg(p string) string {
	return strings.TrimPrefix(p, "github.com/edgeinfer/edgeinfer/")
}

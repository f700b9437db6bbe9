// Package mosquittotest runs a real Eclipse Mosquitto broker (the Debian
// package's binary) for tests: on 127.0.0.1, on a free port, with a
// temporary configuration and, when asked, persistence, TLS, a password
// file and an ACL. Tests skip, saying how to install it, when the binary
// is absent.
//
// With EDGEINFER_TEST_BROKER=mochi the same tests run against mochi-mqtt
// instead (platforms/brokers/mochi, built here on first use), a broker
// written apart from mosquitto: what they rely on is then MQTT, not one
// broker's ways. Options mochi is not configured for here (TLS, users,
// ACLs, bridges) skip the test, saying so.
package mosquittotest

import (
	"bytes"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha512"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Options configure the broker. The zero value is a plain broker without
// persistence that lets anyone in.
type Options struct {
	// Persistence keeps sessions and queued messages across Stop/Start
	// (persistence true, in the test's temporary directory).
	Persistence bool
	// CAFile, CertFile, KeyFile make the listener TLS; RequireClientCert
	// asks clients for a certificate signed by CAFile.
	CAFile, CertFile, KeyFile string
	RequireClientCert         bool
	// Users maps user names to passwords (a mosquitto_passwd file);
	// anonymous clients are then refused.
	Users map[string]string
	// ACL is the acl_file's text ("" means none). mosquitto 2.0's
	// acl_file does not refuse subscriptions (SUBACK 0: messages are just
	// not delivered); DynSec does.
	ACL string
	// DynSec, when set, runs the dynamic-security plugin instead of Users
	// and ACL: its clients are refused what no ACL allows, subscriptions
	// with SUBACK 0x80.
	DynSec *DynSec
	// Extra lines appended to the configuration.
	Extra string
}

// DynSec is a dynamic-security configuration: every user gets one role
// holding ACLs.
type DynSec struct {
	Users map[string]string
	ACLs  []DynACL
}

// DynACL is one ACL of the role: Type is publishClientSend,
// publishClientReceive, subscribePattern, subscribeLiteral, ...; Topic
// may hold %u (the user name) and %c (the client id).
type DynACL struct {
	Type, Topic string
	Allow       bool
}

// dynsecPlugin is where Debian's mosquitto package puts the plugin.
const dynsecPlugin = "/usr/lib/x86_64-linux-gnu/mosquitto_dynamic_security.so"

func (d *DynSec) write(t testing.TB, path string) {
	type acl struct {
		ACLType string `json:"acltype"`
		Topic   string `json:"topic"`
		Allow   bool   `json:"allow"`
	}
	type roleRef struct {
		Rolename string `json:"rolename"`
	}
	type client struct {
		Username   string    `json:"username"`
		Password   string    `json:"password"`
		Salt       string    `json:"salt"`
		Iterations int       `json:"iterations"`
		Roles      []roleRef `json:"roles"`
	}
	var clients []client
	for u, p := range d.Users {
		salt := make([]byte, 12)
		_, _ = rand.Read(salt)
		// the plugin's hash: PBKDF2-SHA512, 64 bytes, base64
		key, err := pbkdf2.Key(sha512.New, p, salt, 101, 64)
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, client{Username: u, Password: base64.StdEncoding.EncodeToString(key),
			Salt: base64.StdEncoding.EncodeToString(salt), Iterations: 101, Roles: []roleRef{{"device"}}})
	}
	acls := []acl{}
	for _, a := range d.ACLs {
		acls = append(acls, acl{a.Type, a.Topic, a.Allow})
	}
	cfg := map[string]any{
		"defaultACLAccess": map[string]bool{"publishClientSend": false, "publishClientReceive": true, "subscribe": false, "unsubscribe": true},
		"clients":          clients,
		"groups":           []any{},
		"roles":            []any{map[string]any{"rolename": "device", "acls": acls}},
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// Broker is a running (or stopped) mosquitto.
type Broker struct {
	t    testing.TB
	Port int
	dir  string
	conf string
	tls  bool
	// mochi is the mochi binary when the broker is mochi-mqtt (its
	// persistence, when asked, in dir/mochi.db).
	mochi   string
	persist bool

	mu  sync.Mutex
	cmd *exec.Cmd
	log logBuffer
}

// logBuffer is the broker's output, written by exec's copying goroutine.
type logBuffer struct {
	mu    sync.Mutex
	b     bytes.Buffer
	wrote chan struct{} // closed at the next write, when someone waits
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.wrote != nil {
		close(l.wrote)
		l.wrote = nil
	}
	return l.b.Write(p)
}

// next is the output so far and a channel closed at the next write.
func (l *logBuffer) next() (string, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.wrote == nil {
		l.wrote = make(chan struct{})
	}
	return l.b.String(), l.wrote
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Binary returns the mosquitto executable, or "" when it is not installed.
func Binary() string {
	if p, err := exec.LookPath("mosquitto"); err == nil {
		return p
	}
	for _, p := range []string{"/usr/sbin/mosquitto", "/usr/local/sbin/mosquitto"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}

// Start starts a broker for the test and stops it at the test's end. It
// skips the test when mosquitto is not installed.
func Start(t testing.TB, opt Options) *Broker {
	t.Helper()
	if os.Getenv(brokerEnv) == "mochi" {
		return startMochi(t, opt)
	}
	if Binary() == "" {
		t.Skip("mosquitto is not installed: apt-get install mosquitto mosquitto-clients (.ci/run installs it)")
	}
	b := &Broker{t: t, Port: FreePort(t), dir: t.TempDir(), tls: opt.CAFile != ""}
	var c strings.Builder
	// user root: a broker started as root otherwise switches to the
	// mosquitto user, who cannot read the test's temporary directory.
	fmt.Fprintf(&c, "user root\nlistener %d 127.0.0.1\n", b.Port)
	// unbounded queues for offline persistent sessions (the default, 1000
	// messages, would drop part of an outage test); in-flight stays at its
	// default (20), which bounds the broker's own redeliveries
	fmt.Fprintf(&c, "max_queued_messages 0\nmax_queued_bytes 0\n")
	if opt.Persistence {
		fmt.Fprintf(&c, "persistence true\npersistence_location %s/\nautosave_interval 1\n", b.dir)
	}
	if b.tls {
		fmt.Fprintf(&c, "cafile %s\ncertfile %s\nkeyfile %s\n", opt.CAFile, opt.CertFile, opt.KeyFile)
		if opt.RequireClientCert {
			c.WriteString("require_certificate true\n")
		}
	}
	if opt.DynSec != nil {
		if _, err := os.Stat(dynsecPlugin); err != nil {
			t.Skipf("mosquitto's dynamic-security plugin is not at %s", dynsecPlugin)
		}
		js := filepath.Join(b.dir, "dynsec.json")
		opt.DynSec.write(t, js)
		fmt.Fprintf(&c, "allow_anonymous false\nplugin %s\nplugin_opt_config_file %s\n", dynsecPlugin, js)
	} else if len(opt.Users) > 0 {
		pw := filepath.Join(b.dir, "passwd")
		for u, p := range opt.Users {
			args := []string{"-b", pw, u, p}
			if _, err := os.Stat(pw); err != nil {
				args = append([]string{"-c"}, args...)
			}
			if out, err := exec.Command(passwdBinary(), args...).CombinedOutput(); err != nil {
				t.Fatalf("mosquitto_passwd: %v\n%s", err, out)
			}
		}
		fmt.Fprintf(&c, "allow_anonymous false\npassword_file %s\n", pw)
	} else {
		c.WriteString("allow_anonymous true\n")
	}
	if opt.ACL != "" {
		acl := filepath.Join(b.dir, "acl")
		if err := os.WriteFile(acl, []byte(opt.ACL), 0o600); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&c, "acl_file %s\n", acl)
	}
	c.WriteString(opt.Extra)
	b.conf = filepath.Join(b.dir, "mosquitto.conf")
	if err := os.WriteFile(b.conf, []byte(c.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	b.Start()
	t.Cleanup(b.Stop)
	return b
}

func passwdBinary() string {
	if p, err := exec.LookPath("mosquitto_passwd"); err == nil {
		return p
	}
	return "/usr/bin/mosquitto_passwd"
}

// URL is the broker's address for a client: tcp://127.0.0.1:port, or
// ssl://localhost:port for a TLS listener (certificates name localhost).
func (b *Broker) URL() string {
	if b.tls {
		return fmt.Sprintf("ssl://localhost:%d", b.Port)
	}
	return fmt.Sprintf("tcp://127.0.0.1:%d", b.Port)
}

// Start (re)starts the broker on its port and waits until it accepts
// connections.
func (b *Broker) Start() {
	b.t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cmd != nil {
		return
	}
	cmd := exec.Command(Binary(), "-c", b.conf)
	if b.mochi != "" {
		cmd = exec.Command(b.mochi, "-addr", fmt.Sprintf("127.0.0.1:%d", b.Port))
		if b.persist {
			cmd.Args = append(cmd.Args, "-db", filepath.Join(b.dir, "mochi.db"))
		}
	}
	cmd.Stdout, cmd.Stderr = &b.log, &b.log
	if err := cmd.Start(); err != nil {
		b.t.Fatalf("start mosquitto: %v", err)
	}
	b.cmd = cmd
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", b.Port), 200*time.Millisecond)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("mosquitto did not listen on %d: %v\n%s", b.Port, err, b.log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop stops the broker with SIGTERM (it saves its persistence file) and
// waits for it to exit. Stopping a stopped broker does nothing.
func (b *Broker) Stop() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cmd == nil {
		return
	}
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = b.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = b.cmd.Process.Kill()
		<-done
	}
	b.cmd = nil
}

// Forget removes what a stopped broker saved (sessions, queued and
// retained messages): the next Start is a broker restarted without
// persistence, or one whose disk was lost. It must be called while the
// broker is stopped.
func (b *Broker) Forget() {
	b.t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cmd != nil {
		b.t.Fatal("mosquittotest: Forget on a running broker")
	}
	for _, f := range []string{"mosquitto.db", "mochi.db"} {
		if err := os.Remove(filepath.Join(b.dir, f)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			b.t.Fatal(err)
		}
	}
}

// Log is what the broker printed so far.
func (b *Broker) Log() string { return b.log.String() }

// Dump is the broker's own account of its clients and shared subscription
// groups, for a stalled test to print: mochi-mqtt prints it on SIGUSR1
// (platforms/brokers/mochi). It is "" for mosquitto, which has no such
// dump, and for a stopped broker.
func (b *Broker) Dump() string {
	const end = "== end of mochi state"
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.mochi == "" || b.cmd == nil {
		return ""
	}
	before, _ := b.log.next()
	if err := b.cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		return fmt.Sprintf("(mochi: %v)", err)
	}
	timeout := time.NewTimer(5 * time.Second)
	defer timeout.Stop()
	for {
		out, wrote := b.log.next()
		out = out[len(before):]
		if i := strings.Index(out, end); i >= 0 {
			return out[:i+len(end)]
		}
		select {
		case <-wrote:
		case <-timeout.C:
			return "(mochi printed no state within 5 s)\n" + out
		}
	}
}

// FreePort returns a TCP port free on 127.0.0.1 right now.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

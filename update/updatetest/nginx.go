// Package updatetest starts the real servers update tests run against:
// Debian's nginx serving a repository directory over HTTPS on loopback,
// with a certificate made for the test.
package updatetest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Nginx is a running nginx serving one directory over HTTPS.
type Nginx struct {
	URL    string       // https://127.0.0.1:PORT
	CAFile string       // PEM of the CA that signed its certificate
	Client *http.Client // trusts CAFile only
	Log    string       // access log: "URI STATUS BYTES_SENT" per request
	stop   func()
}

// Stop kills nginx (a host gone: connections are refused); the test's end
// does it too.
func (n *Nginx) Stop() { n.stop() }

// BytesSent sums the bytes nginx sent (headers and bodies) for the
// requests logged so far, and counts them. nginx writes a request's line
// when it has finished it.
func (n *Nginx) BytesSent() (bytes int64, requests int, err error) {
	b, err := os.ReadFile(n.Log)
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			continue
		}
		v, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("updatetest: access log line %q", line)
		}
		bytes += v
		requests++
	}
	return bytes, requests, nil
}

// NginxPath finds the nginx binary ("" when absent).
func NginxPath() string {
	for _, p := range []string{"/usr/sbin/nginx", "/usr/bin/nginx"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath("nginx"); err == nil {
		return p
	}
	return ""
}

// StartNginx serves root at https://127.0.0.1:PORT/ until the test ends. It
// skips the test when nginx is not installed (.ci/run installs it).
func StartNginx(t testing.TB, root string) *Nginx {
	t.Helper()
	bin := NginxPath()
	if bin == "" {
		t.Skip("nginx is not installed (apt-get install nginx; .ci/run does)")
	}
	dir := t.TempDir()
	caPEM, certPEM, keyPEM := makeCerts(t)
	n := &Nginx{CAFile: filepath.Join(dir, "ca.pem"), Log: filepath.Join(dir, "access.log")}
	for name, b := range map[string][]byte{"ca.pem": caPEM, "cert.pem": certPEM, "key.pem": keyPEM} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	port := freePort(t)
	conf := fmt.Sprintf(`daemon off;
master_process off;
worker_processes 1;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
events { worker_connections 4096; }
http {
  log_format wire '$request_uri $status $bytes_sent';
  access_log %[1]s/access.log wire;
  client_body_temp_path %[1]s/tmp;
  proxy_temp_path %[1]s/tmp;
  fastcgi_temp_path %[1]s/tmp;
  uwsgi_temp_path %[1]s/tmp;
  scgi_temp_path %[1]s/tmp;
  types { application/json json; }
  default_type application/octet-stream;
  sendfile on;
  server {
    listen 127.0.0.1:%[2]d ssl;
    ssl_certificate %[1]s/cert.pem;
    ssl_certificate_key %[1]s/key.pem;
    root %[3]s;
    location / { try_files $uri =404; }
  }
}
`, dir, port, root)
	if err := os.WriteFile(filepath.Join(dir, "nginx.conf"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(dir, "tmp"), 0o700)
	cmd := exec.Command(bin, "-p", dir, "-c", filepath.Join(dir, "nginx.conf"))
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var once sync.Once
	n.stop = func() {
		once.Do(func() {
			cmd.Process.Kill()
			<-done
		})
	}
	t.Cleanup(n.Stop)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	n.Client = &http.Client{Timeout: time.Minute, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	n.URL = "https://127.0.0.1:" + strconv.Itoa(port)
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := tls.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port), &tls.Config{RootCAs: pool})
		if err == nil {
			c.Close()
			return n
		}
		select {
		case err := <-done:
			b, _ := os.ReadFile(filepath.Join(dir, "error.log"))
			t.Fatalf("nginx exited: %v\n%s", err, b)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("nginx did not listen on %d: %v", port, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func freePort(t testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// makeCerts makes a CA and a server certificate for 127.0.0.1 signed by it.
func makeCerts(t testing.TB) (caPEM, certPEM, keyPEM []byte) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "edgeinfer test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})
}

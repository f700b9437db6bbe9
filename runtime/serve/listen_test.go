package serve

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestTLS serves HTTPS with a certificate made here, and a client that
// trusts it gets the model list; plain HTTP to the same port fails.
func TestTLS(t *testing.T) {
	f := openFixture(t, Config{})
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(key)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600)
	srv, err := New(f.eng, Config{TLSCertFile: certFile, TLSKeyFile: keyFile}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := c.Get("https://" + ln.Addr().String() + "/v1/models")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("https: %v %v", resp, err)
	}
	resp.Body.Close()
	if r, err := http.Get("http://" + ln.Addr().String() + "/v1/models"); err == nil && r.StatusCode == 200 {
		t.Fatal("plain HTTP answered on the TLS port")
	}
	if _, err := New(f.eng, Config{TLSCertFile: certFile}, nil); err == nil {
		t.Fatal("a certificate without its key was accepted")
	}
}

// TestLimits: a prompt over MaxPromptTokens is refused with the counts,
// and a client that never finishes its headers is dropped after
// ReadHeaderTimeout.
func TestLimits(t *testing.T) {
	f := openFixture(t, Config{})
	srv, err := New(f.eng, Config{MaxPromptTokens: 3, ReadHeaderTimeout: 300 * time.Millisecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	defer func() { cancel(); <-done }()
	resp, err := http.Post("http://"+ln.Addr().String()+"/v1/completions", "application/json",
		strings.NewReader(`{"model":"tinylm","prompt":"Call me Ishmael, some years ago","max_tokens":2}`))
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if e := apiErr(t, data); resp.StatusCode != 400 || e.Code == nil || *e.Code != "prompt_too_long" || !strings.Contains(e.Message, "limit of 3") {
		t.Fatalf("%d %s", resp.StatusCode, data)
	}
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprint(conn, "POST /v1/completions HTTP/1.1\r\nHost: x\r\n") // never ends its headers
	start := time.Now()
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadAll(conn); err != nil {
		t.Fatalf("the connection was not closed: %v", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("closed after %v, header timeout 300ms", d)
	}
}

package fleet

import (
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/sigstore/sigstore/pkg/signature"
	"github.com/theupdateframework/go-tuf/v2/metadata"
)

// A key file is an ed25519 private key, PKCS #8 PEM, named
// <repo>.<role>.<keyid prefix>.pem. Root keys belong offline: keygen can
// write them to a directory of their own (a removable drive) and only the
// commands that change the root need it.

// Key is a signing key with its TUF key id.
type Key struct {
	ID      string
	Role    string
	Repo    string
	Private ed25519.PrivateKey
	Path    string
}

// GenerateKey makes a new ed25519 key for role of repo and writes it to
// dir (mode 0600).
func GenerateKey(dir, repo, role string) (*Key, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	k := &Key{Role: role, Repo: repo, Private: priv}
	if k.ID, err = keyID(priv); err != nil {
		return nil, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	k.Path = filepath.Join(dir, fmt.Sprintf("%s.%s.%s.pem", repo, role, k.ID[:12]))
	if err := os.WriteFile(k.Path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		return nil, err
	}
	return k, nil
}

// LoadKey reads a key file written by GenerateKey.
func LoadKey(path string) (*Key, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("%w: %s is not a PEM private key", ErrKeys, path)
	}
	p, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrKeys, path, err)
	}
	priv, ok := p.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%w: %s is not an ed25519 key", ErrKeys, path)
	}
	parts := strings.Split(filepath.Base(path), ".")
	if len(parts) != 4 {
		return nil, fmt.Errorf("%w: key file name %s (want REPO.ROLE.ID.pem)", ErrKeys, path)
	}
	k := &Key{Repo: parts[0], Role: parts[1], Private: priv, Path: path}
	if k.ID, err = keyID(priv); err != nil {
		return nil, err
	}
	return k, nil
}

// LoadKeys reads every key file of the directories (missing ones are
// skipped: the offline root keys are usually not mounted).
func LoadKeys(dirs ...string) ([]*Key, error) {
	var out []*Key
	for _, dir := range dirs {
		ents, err := os.ReadDir(dir)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, e := range ents {
			if e.IsDir() || !strings.HasSuffix(e.Name(), ".pem") {
				continue
			}
			k, err := LoadKey(filepath.Join(dir, e.Name()))
			if err != nil {
				return nil, err
			}
			out = append(out, k)
		}
	}
	return out, nil
}

// PublicKey is the key's TUF form.
func (k *Key) PublicKey() *metadata.Key {
	mk, _ := metadata.KeyFromPublicKey(k.Private.Public())
	return mk
}

// Signer is the key as a go-tuf signer.
func (k *Key) Signer() signature.Signer {
	s, _ := signature.LoadSigner(k.Private, crypto.Hash(0))
	return s
}

func keyID(priv ed25519.PrivateKey) (string, error) {
	mk, err := metadata.KeyFromPublicKey(priv.Public())
	if err != nil {
		return "", err
	}
	return mk.ID()
}

package fleettest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/bundle/build"
	"github.com/edgeinfer/edgeinfer/update"
	"github.com/edgeinfer/edgeinfer/update/fleet"
)

// Local is a fleet's cloud side on one machine, for a device under test:
// a signed repository (image and director roles), the fleet's server
// answering on a broker, and an operator's client that starts rollouts
// and watches the devices' retained state.
type Local struct {
	Repo   *fleet.Repository
	Server *fleet.Server
	Op     *fleet.Client
	dir    string
}

// StartLocal makes the repository under dir and serves it as fleet name on
// broker.
func StartLocal(ctx context.Context, broker, name, dir string) (*Local, error) {
	repo, keys := filepath.Join(dir, "repo"), filepath.Join(dir, "keys")
	r, err := fleet.Init(repo, keys, keys, fleet.InitOptions{Director: true}, nil)
	if err != nil {
		return nil, err
	}
	l := &Local{Repo: r, dir: dir}
	if l.Server, err = fleet.Serve(ctx, fleet.ServeConfig{Broker: broker, Fleet: name, Instance: "a", Repo: repo, Keys: []string{keys}, Tick: 200 * time.Millisecond}); err != nil {
		return nil, err
	}
	if l.Op, err = fleet.Dial(ctx, fleet.ClientConfig{Broker: broker, Fleet: name}); err != nil {
		l.Server.Close()
		return nil, err
	}
	return l, nil
}

// Roots are the paths of the image and director roots a device trusts.
func (l *Local) Roots() (image, director string) {
	return l.Repo.RootPath(update.RepoImage), l.Repo.RootPath(update.RepoDirector)
}

// PublishHF imports the Hugging Face model in hf as name@version, seals
// its health check and signs it into the repository.
func (l *Local) PublishHF(ctx context.Context, hf, name, version string) error {
	dir := filepath.Join(l.dir, "release-"+name+"-"+version)
	if _, err := build.ImportHF(ctx, hf, dir, build.ImportOptions{Name: name, Version: version}); err != nil {
		return err
	}
	if err := SetHealth(ctx, dir, 4, false); err != nil {
		return err
	}
	_, _, err := l.Repo.Publish(ctx, dir, fleet.ReleaseOptions{})
	return err
}

// Roll rolls name@version out to every device in one wave.
func (l *Local) Roll(ctx context.Context, name, version string) error {
	return l.Op.StartRollout(ctx, fleet.Rollout{ID: name + "-" + version, Model: name, Version: version, Waves: []int{100}})
}

// Active is the version the device reports running ("" before it reports).
func (l *Local) Active(device string) string {
	if d := l.Op.View().Devices()[device]; d != nil && d.Update != nil {
		return d.Update.Active
	}
	return ""
}

// WaitReported waits, on the view's changes, until the device has
// reported its update state: a rollout started before would not know it.
func (l *Local) WaitReported(device string, d time.Duration) error {
	return l.wait(d, func() bool {
		dev := l.Op.View().Devices()[device]
		return dev != nil && dev.Update != nil
	}, func() string { return device + " reports no update state" })
}

// WaitActive waits, on the view's changes, until the device reports
// version active; after d it says what the device reports.
func (l *Local) WaitActive(device, version string, d time.Duration) error {
	return l.wait(d, func() bool { return l.Active(device) == version },
		func() string {
			return fmt.Sprintf("%s does not run %s (it reports %q)", device, version, l.Active(device))
		})
}

func (l *Local) wait(d time.Duration, ok func() bool, why func() string) error {
	deadline := time.After(d)
	for !ok() {
		select {
		case <-l.Op.View().Changed():
		case <-deadline:
			return fmt.Errorf("fleettest: within %v: %s", d, why())
		}
	}
	return nil
}

// Close stops the client and the server.
func (l *Local) Close() error {
	l.Op.Close()
	return l.Server.Close()
}

// StreamChat runs one streamed OpenAI chat completion against the HTTP API
// at base (http://host:port) and checks the stream: 200, chunks that
// parse, a finish reason, [DONE] last. It returns the text.
func StreamChat(ctx context.Context, base, model, token string) (string, error) {
	body, _ := json.Marshal(map[string]any{"model": model, "messages": []map[string]string{{"role": "user", "content": "Hello"}},
		"max_tokens": 8, "stream": true})
	req, _ := http.NewRequestWithContext(ctx, "POST", base+"/v1/chat/completions", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		return "", fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	var text strings.Builder
	finished, done := false, false
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if line == "[DONE]" {
			done = true
			break
		}
		var chunk struct {
			Choices []struct {
				Delta        struct{ Content string } `json:"delta"`
				FinishReason *string                  `json:"finish_reason"`
			} `json:"choices"`
			Error any `json:"error"`
		}
		if err := json.Unmarshal([]byte(line), &chunk); err != nil {
			return "", fmt.Errorf("chunk %q: %w", line, err)
		}
		if chunk.Error != nil {
			return "", fmt.Errorf("error in the stream: %s", line)
		}
		for _, c := range chunk.Choices {
			text.WriteString(c.Delta.Content)
			finished = finished || c.FinishReason != nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	if !done || !finished {
		return "", fmt.Errorf("stream ended without a finish reason and [DONE] (got %q)", text.String())
	}
	return text.String(), nil
}

// FreeAddr is a loopback address with a port nobody listens on now (for a
// device's HTTP API under test).
func FreeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

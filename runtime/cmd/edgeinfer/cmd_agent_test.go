package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/edgeinfer/edgeinfer/pkg/bundle/build"
	"github.com/edgeinfer/edgeinfer/pkg/link"
	"github.com/edgeinfer/edgeinfer/pkg/link/mosquittotest"
	"github.com/edgeinfer/edgeinfer/pkg/store"
	"github.com/edgeinfer/edgeinfer/runtime/device"
	"github.com/edgeinfer/edgeinfer/runtime/device/fleettest"
	"github.com/edgeinfer/edgeinfer/runtime/ort/orttest"
	"github.com/edgeinfer/edgeinfer/update/wire"
)

func TestAgentConfigErrors(t *testing.T) {
	dir := t.TempDir()
	cases := []struct{ json, want string }{
		{`{"broker":"tcp://127.0.0.1:1","fleet":"f","device":"d"}`, "store: required"},
		{`{"store":"s.db","broker":"tcp://127.0.0.1:1","fleet":"f","device":"d","telemetry_intervall":"1s"}`, `unknown field "telemetry_intervall"`},
		{`{"store":"s.db","broker":"tcp://127.0.0.1:1","fleet":"f","device":"d","telemetry_interval":"often"}`, "telemetry_interval"},
		{`{"store":"s.db","broker":"tcp://127.0.0.1:1","fleet":"f","device":"d/x"}`, "device"},
		{`{"store":"s.db","broker":"http://127.0.0.1:1","fleet":"f","device":"d"}`, "scheme"},
		{`{"store":"s.db","broker":"tcp://127.0.0.1:1","fleet":"f","device":"d","log_level":"loud"}`, "log_level"},
		{`{"store":"s.db","broker":"ssl://h:1","fleet":"f","device":"d","cert_file":"c.pem"}`, "cert_file and key_file"},
	}
	for i, tc := range cases {
		p := filepath.Join(dir, "agent.json")
		if err := os.WriteFile(p, []byte(tc.json), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := loadAgentConfig(p)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("case %d: %v, want an error naming %q", i, err, tc.want)
		}
	}
}

// TestAgent runs the agent against a real broker (with an empty store:
// the link alone) and watches edgeinfer/v1/# as mosquitto_sub would:
// birth, telemetry, a ping answer, and the offline status on shutdown.
func TestAgent(t *testing.T) {
	b := mosquittotest.Start(t, mosquittotest.Options{Persistence: true})
	dir := t.TempDir()
	st, err := store.Open(context.Background(), filepath.Join(dir, "models.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	cfgFile := filepath.Join(dir, "agent.json")
	cfgJSON := `{"store":"` + filepath.Join(dir, "models.db") + `","broker":"` + b.URL() + `","fleet":"f","device":"d","telemetry_interval":"200ms"}`
	if err := os.WriteFile(cfgFile, []byte(cfgJSON), 0o600); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[string][]string{}
	arrived := make(chan struct{}, 1) // a message was seen
	watch := mqtt.NewClient(mqtt.NewClientOptions().AddBroker(b.URL()).SetClientID("watch"))
	if tok := watch.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	defer watch.Disconnect(50)
	watch.Subscribe("edgeinfer/v1/#", 1, func(_ mqtt.Client, m mqtt.Message) {
		mu.Lock()
		seen[m.Topic()] = append(seen[m.Topic()], string(m.Payload()))
		mu.Unlock()
		select {
		case arrived <- struct{}{}:
		default: // a wake-up is already pending
		}
	}).Wait()
	has := func(topic, sub string) bool {
		mu.Lock()
		defer mu.Unlock()
		for _, p := range seen[topic] {
			if strings.Contains(p, sub) {
				return true
			}
		}
		return false
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	var out bytes.Buffer
	go func() {
		cfg, err := loadAgentConfig(cfgFile)
		if err != nil {
			done <- err
			return
		}
		done <- agent(ctx, &out, withLogger(cfg, slog.New(slog.DiscardHandler)))
	}()
	top := link.NewTopics("f", "d")
	wait := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for !cond() {
			select {
			case <-arrived:
			case <-deadline:
				mu.Lock()
				defer mu.Unlock()
				t.Fatalf("no %s; seen %v", what, seen)
			}
		}
	}
	wait("birth", func() bool { return has(top.Status(), `"state":"online"`) })
	wait("telemetry", func() bool { return has(top.Telemetry(), `"schema":"edgeinfer.telemetry/1"`) })
	watch.Publish(top.Cmd("ping"), 1, false, `{"id":"p1"}`).Wait()
	wait("ping answer", func() bool { return has(top.CmdResponse("ping"), `"id":"p1","command":"ping","ok":true`) })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	wait("offline status", func() bool {
		return has(top.Status(), `"state":"offline","fleet":"f","device":"d","reason":"shutdown"`)
	})
	wait("start and stop events", func() bool {
		return has(top.Events(), `"event":"agent_started"`) && has(top.Events(), `"event":"agent_stopping"`)
	})
	var snap link.Snapshot
	mu.Lock()
	_ = json.Unmarshal([]byte(seen[top.Telemetry()][0]), &snap)
	mu.Unlock()
	if snap.Seq == 0 || snap.Power.Value == nil && snap.Power.Reason == "" {
		t.Errorf("telemetry %+v", snap)
	}
	t.Logf("%s", out.String())
}

// TestAgentUpdates is the device side of a rollout end to end: a TUF
// repository made by edgeinfer fleet keygen/publish, edgeinfer fleet serve
// answering on a real broker, and edgeinfer agent with an update section
// and an empty store. Rolling tiny@1 out installs it (first version: loaded
// into the serving engine), rolling tiny@2 (one layer changed) swaps it in;
// the events arrive on the events topic, edgeinfer update status shows
// both versions while the agent runs (its retained state) and after it
// stopped (the store).
func TestAgentUpdates(t *testing.T) {
	orttest.Need(t)
	ctx := context.Background()
	b := mosquittotest.Start(t, mosquittotest.Options{})
	tmp := t.TempDir()
	repo, keys := filepath.Join(tmp, "repo"), filepath.Join(tmp, "keys")
	run := func(want string, args ...string) string { t.Helper(); return mustRun(t, ctx, want, args...) }
	run("director root", "fleet", "keygen", "--repo", repo, "--keys", keys, "--director")
	// tiny is the tiny Llama of examples/tinylm: its tokenizer turns the
	// HTTP API's chat text into tokens.
	for _, v := range []struct{ version string }{{"1"}, {"2"}} {
		bdir := filepath.Join(tmp, "b"+v.version)
		if _, err := build.ImportHF(ctx, "../../../examples/tinylm", bdir, build.ImportOptions{Name: "tiny", Version: v.version}); err != nil {
			t.Fatal(err)
		}
		if err := fleettest.SetHealth(ctx, bdir, 4, false); err != nil {
			t.Fatal(err)
		}
		run("published tiny@"+v.version, "fleet", "publish", "--repo", repo, "--keys", keys, "--bundle", bdir)
	}
	sctx, stopServe := context.WithCancel(ctx)
	var serveOut syncBuffer
	served := make(chan int)
	go func() {
		served <- runMain(sctx, &serveOut, &serveOut, []string{"fleet", "serve", "--broker", b.URL(), "--fleet", "f", "--repo", repo, "--keys", keys, "--instance", "a", "--stats-every", "0"})
	}()
	defer func() {
		stopServe()
		if code := <-served; code != 0 {
			t.Errorf("fleet serve exit %d:\n%s", code, serveOut.String())
		}
	}()

	events := make(chan string, 64)
	watch := mqtt.NewClient(mqtt.NewClientOptions().AddBroker(b.URL()).SetClientID("watch"))
	if tok := watch.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	defer watch.Disconnect(50)
	watch.Subscribe(link.NewTopics("f", "cam-1").Events(), 1, func(_ mqtt.Client, m mqtt.Message) { events <- string(m.Payload()) }).Wait()
	states := make(chan struct{}, 1) // the agent's retained state changed
	watch.Subscribe(wire.StateTopic(link.NewTopics("f", "cam-1")), 1, func(mqtt.Client, mqtt.Message) {
		select {
		case states <- struct{}{}:
		default: // a wake-up is already pending
		}
	}).Wait()

	cfgFile := filepath.Join(tmp, "agent.json")
	addr := mustFreeAddr(t)
	cfgJSON, _ := json.Marshal(map[string]any{"store": filepath.Join(tmp, "models.db"), "broker": b.URL(), "fleet": "f", "device": "cam-1",
		"board": "sim", "telemetry_interval": "1s", "log_level": "warn", "http": map[string]any{"addr": addr, "token": "s3cret"},
		"update": map[string]any{"model": "tiny", "image_root": filepath.Join(repo, "image", "1.root.json"),
			"director_root": filepath.Join(repo, "director", "1.root.json"), "labels": map[string]string{"line": "1"},
			"check_interval": "1m", "retry_interval": "500ms"}})
	if err := os.WriteFile(cfgFile, cfgJSON, 0o600); err != nil {
		t.Fatal(err)
	}
	actx, stopAgent := context.WithCancel(ctx)
	var agentOut syncBuffer
	agentDone := make(chan int)
	go func() { agentDone <- runMain(actx, &agentOut, &agentOut, []string{"agent", "--config", cfgFile}) }()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			stopAgent()
			if code := <-agentDone; code != 0 {
				t.Errorf("agent exit %d:\n%s", code, agentOut.String())
			}
		}
	}
	defer stop()

	// waitActive rolls release out and waits for the active event and the
	// agent's retained state naming it.
	waitActive := func(version, previous string) {
		t.Helper()
		run("rollout tiny-"+version+" of tiny@"+version+" started", "fleet", "rollout", "--broker", b.URL(), "--fleet", "f",
			"--release", "tiny@"+version, "--waves", "100", "--select", "line=1")
		deadline := time.After(2 * time.Minute)
		for active := false; !active; {
			select {
			case e := <-events:
				active = strings.Contains(e, `"kind":"active"`) && strings.Contains(e, `"version":"`+version+`"`)
			case <-deadline:
				t.Fatalf("no active event for tiny@%s; agent:\n%s", version, agentOut.String())
			}
		}
		want := fmt.Sprintf("active %s, previous %s", version, previous)
		// update status reads the retained state: ask again each time it changes
		deadline = time.After(30 * time.Second)
		for {
			var stdout, stderr bytes.Buffer
			runMain(ctx, &stdout, &stderr, []string{"update", "status", "--agent-config", cfgFile})
			if strings.Contains(stdout.String(), want) && strings.Contains(stdout.String(), "retained state") {
				t.Logf("while the agent runs:\n%s", stdout.String())
				break
			}
			select {
			case <-states:
			case <-deadline:
				t.Fatalf("update status never showed %q:\n%s%s", want, stdout.String(), stderr.String())
			}
		}
	}
	waitActive("1", "none")
	if !strings.Contains(agentOut.String(), "serving the HTTP API on http://"+addr) {
		t.Fatalf("agent with an http section:\n%s", agentOut.String())
	}
	// curl -N, streamed chat completions one after another, while tiny@2
	// rolls out and swaps in: none fails.
	var chats, failed atomic.Int64
	var failures syncBuffer
	chatStop := make(chan struct{})
	chatDone := make(chan struct{})
	go func() {
		defer close(chatDone)
		for {
			select {
			case <-chatStop:
				return
			default:
			}
			if err := curlChat(ctx, addr, "s3cret"); err != nil {
				failed.Add(1)
				fmt.Fprintln(&failures, err)
			}
			chats.Add(1)
		}
	}()
	waitActive("2", "1")
	for n := chats.Load(); chats.Load() < n+2; {
		if err := curlChat(ctx, addr, "s3cret"); err != nil { // on 2, beside the loop
			t.Errorf("chat on tiny@2: %v", err)
			break
		}
	}
	close(chatStop)
	<-chatDone
	if failed.Load() > 0 {
		t.Errorf("%d of %d streamed chat completions failed during the rollout:\n%s", failed.Load(), chats.Load(), failures.String())
	}
	t.Logf("%d streamed chat completions (curl -N) during the rollout of tiny@2, %d failed", chats.Load(), failed.Load())
	var stdout, stderr bytes.Buffer
	if code := runMain(ctx, &stdout, &stderr, []string{"update", "apply", "--agent-config", cfgFile}); code == 0 || !strings.Contains(stderr.String(), "updates this device itself") {
		t.Errorf("apply beside a running agent: exit %d\n%s", code, stderr.String())
	}
	stop()
	out := run("active 2, previous 1", "update", "status", "--agent-config", cfgFile)
	t.Logf("after the agent stopped:\n%s", out)
	if !strings.Contains(out, "last update: active tiny@2") {
		t.Errorf("journal: %s", out)
	}
	// stopped, the device's identity asks the fleet over the broker itself
	run("up to date", "update", "check", "--agent-config", cfgFile)
	// restarted, the agent serves the installed version from the store
	rctx, stopAgain := context.WithCancel(ctx)
	var again syncBuffer
	againDone := make(chan int)
	go func() { againDone <- runMain(rctx, &again, &again, []string{"agent", "--config", cfgFile}) }()
	if !again.waitFor(20*time.Second, "1 model(s)") {
		t.Fatalf("restarted agent:\n%s", again.String())
	}
	stopAgain()
	if code := <-againDone; code != 0 {
		t.Errorf("restarted agent exit %d:\n%s", code, again.String())
	}
}

// curlChat runs one streamed chat completion as a user would, with
// curl -N (Go's client where curl is absent), and checks the stream ends
// with a finish reason and [DONE].
func curlChat(ctx context.Context, addr, token string) error {
	body := `{"model":"tiny","messages":[{"role":"user","content":"Hello"}],"max_tokens":8,"stream":true}`
	var out []byte
	if curl, err := exec.LookPath("curl"); err == nil {
		out, err = exec.CommandContext(ctx, curl, "-sSN", "--fail-with-body", "-H", "Authorization: Bearer "+token,
			"-H", "Content-Type: application/json", "-d", body, "http://"+addr+"/v1/chat/completions").CombinedOutput()
		if err != nil {
			return fmt.Errorf("curl: %v: %s", err, out)
		}
	} else {
		req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+addr+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if out, err = io.ReadAll(resp.Body); err != nil || resp.StatusCode != 200 {
			return fmt.Errorf("status %d %v: %s", resp.StatusCode, err, out)
		}
	}
	if !bytes.Contains(out, []byte(`"finish_reason":"`)) || !bytes.HasSuffix(bytes.TrimSpace(out), []byte("data: [DONE]")) {
		return fmt.Errorf("stream without a finish reason and [DONE]: %s", out)
	}
	return nil
}

func withLogger(c device.Config, l *slog.Logger) device.Config { c.Logger = l; return c }

func mustFreeAddr(t *testing.T) string {
	t.Helper()
	a, err := fleettest.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return a
}

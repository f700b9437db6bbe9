package link

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"
)

// CommandSchema versions command responses.
const CommandSchema = "edgeinfer.cmd/1"

// MaxCommandBytes bounds a command payload.
const MaxCommandBytes = 64 << 10

// CommandRequest is the payload of cmd/<name>: a request id, echoed in the
// response, and the command's arguments.
type CommandRequest struct {
	ID   string          `json:"id"`
	Args json.RawMessage `json:"args,omitempty"`
}

// CommandResponse is the payload of cmdres/<name>.
type CommandResponse struct {
	Schema  string `json:"schema"`
	ID      string `json:"id"`
	Command string `json:"command"`
	OK      bool   `json:"ok"`
	Error   string `json:"error,omitempty"`
	Result  any    `json:"result,omitempty"`
	Time    string `json:"time"`
}

// CommandHandler runs one command; its result is marshalled into the
// response. args is the request's "args" (nil when absent).
type CommandHandler func(ctx context.Context, args json.RawMessage) (any, error)

var errCommand = errors.New("link: bad command")

// ParseCommand checks a command payload: a JSON object of at most
// MaxCommandBytes with a printable "id" of 1–128 characters and optional
// "args"; unknown fields are refused.
func ParseCommand(payload []byte) (CommandRequest, error) {
	var r CommandRequest
	if len(payload) > MaxCommandBytes {
		return r, fmt.Errorf("%w: payload of %d bytes (max %d)", errCommand, len(payload), MaxCommandBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return CommandRequest{}, fmt.Errorf("%w: payload is not {\"id\":..., \"args\":...}: %v", errCommand, err)
	}
	if dec.More() {
		return CommandRequest{}, fmt.Errorf("%w: data after the JSON object", errCommand)
	}
	if r.ID == "" || len(r.ID) > 128 || strings.IndexFunc(r.ID, func(c rune) bool { return !unicode.IsPrint(c) }) >= 0 {
		return CommandRequest{ID: ""}, fmt.Errorf("%w: id must be 1-128 printable characters", errCommand)
	}
	if a := bytes.TrimSpace(r.Args); len(a) == 0 || string(a) == "null" {
		r.Args = nil
	}
	return r, nil
}

// Commands answers the device's commands: messages on cmd/<name> run the
// handler registered for name, and the response (with the request's id)
// goes to cmdres/<name>. Unknown commands, malformed payloads, handler
// errors and handler panics all become error responses.
//
// Commands does not authenticate anyone: the broker's ACL is what decides
// who may publish to a device's cmd/ topics (see the package doc).
//
// Commands is safe for concurrent use.
type Commands struct {
	link    *Link
	log     *slog.Logger
	timeout time.Duration
	mu      sync.Mutex
	h       map[string]CommandHandler
}

// NewCommands returns an empty command set for l; each handler gets
// timeout (0 means 10 s).
func NewCommands(l *Link, timeout time.Duration) *Commands {
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	return &Commands{link: l, log: l.log, timeout: timeout, h: map[string]CommandHandler{}}
}

// Handle registers h for command name (one topic level).
func (c *Commands) Handle(name string, h CommandHandler) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.h[name] = h
}

// Start subscribes to the device's cmd/+ topics.
func (c *Commands) Start(ctx context.Context) error {
	return c.link.Subscribe(ctx, c.link.topics.Cmd("+"), 1, c.dispatch)
}

// Run parses and runs one command and returns its response; dispatch
// publishes it. It never panics.
func (c *Commands) Run(ctx context.Context, name string, payload []byte) (resp CommandResponse) {
	resp = CommandResponse{Schema: CommandSchema, Command: name}
	defer func() {
		if p := recover(); p != nil {
			resp.OK, resp.Result, resp.Error = false, nil, fmt.Sprintf("command %s panicked: %v", name, p)
			c.log.Error("link: command panicked", "command", name, "panic", p)
		}
		resp.Time = time.Now().UTC().Format(time.RFC3339Nano)
	}()
	req, err := ParseCommand(payload)
	resp.ID = req.ID
	if err != nil {
		resp.Error = err.Error()
		return resp
	}
	c.mu.Lock()
	h := c.h[name]
	known := make([]string, 0, len(c.h))
	for k := range c.h {
		known = append(known, k)
	}
	c.mu.Unlock()
	if h == nil {
		slices.Sort(known)
		resp.Error = fmt.Sprintf("unknown command %q (known: %s)", name, strings.Join(known, ", "))
		return resp
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	res, err := h(ctx, req.Args)
	if err != nil {
		resp.Error = err.Error()
		return resp
	}
	resp.OK, resp.Result = true, res
	return resp
}

func (c *Commands) dispatch(m Message) {
	rest, ok := c.link.topics.Under(m.Topic)
	name, ok2 := strings.CutPrefix(rest, "cmd/")
	if !ok || !ok2 || name == "" || strings.Contains(name, "/") {
		return
	}
	resp := c.Run(c.link.ctx, name, m.Payload)
	b, err := json.Marshal(resp)
	if err != nil {
		b, _ = json.Marshal(CommandResponse{Schema: CommandSchema, ID: resp.ID, Command: name, Error: "result does not marshal: " + err.Error(), Time: resp.Time})
	}
	ctx, cancel := context.WithTimeout(c.link.ctx, c.timeout)
	defer cancel()
	if err := c.link.Publish(ctx, c.link.topics.CmdResponse(name), 1, false, b); err != nil {
		c.log.Warn("link: command response not sent", "command", name, "id", resp.ID, "err", err)
	}
}

// Builtins are the standard commands' dependencies; nil fields leave the
// command out.
type Builtins struct {
	Telemetry *Telemetry
	LogLevel  *slog.LevelVar
	Models    func() []ModelVersion
}

// RegisterBuiltins adds ping, snapshot, set_interval, set_log_level and
// list_models.
func (c *Commands) RegisterBuiltins(b Builtins) {
	start := time.Now()
	c.Handle("ping", func(context.Context, json.RawMessage) (any, error) {
		return map[string]any{"pong": true, "uptime_s": time.Since(start).Seconds()}, nil
	})
	if t := b.Telemetry; t != nil {
		c.Handle("snapshot", func(ctx context.Context, _ json.RawMessage) (any, error) {
			s, err := t.Publish(ctx)
			if err != nil {
				return nil, err
			}
			return map[string]any{"seq": s.Seq, "topic": c.link.topics.Telemetry()}, nil
		})
		c.Handle("set_interval", func(_ context.Context, args json.RawMessage) (any, error) {
			var a struct {
				Interval string `json:"interval"`
			}
			if err := strictJSON(args, &a); err != nil {
				return nil, fmt.Errorf("args: want {\"interval\": \"30s\"}: %w", err)
			}
			d, err := time.ParseDuration(a.Interval)
			if err != nil {
				return nil, fmt.Errorf("args.interval: %w", err)
			}
			if err := t.SetInterval(d); err != nil {
				return nil, err
			}
			return map[string]any{"interval": d.String()}, nil
		})
	}
	if lv := b.LogLevel; lv != nil {
		c.Handle("set_log_level", func(_ context.Context, args json.RawMessage) (any, error) {
			var a struct {
				Level string `json:"level"`
			}
			if err := strictJSON(args, &a); err != nil {
				return nil, fmt.Errorf("args: want {\"level\": \"debug|info|warn|error\"}: %w", err)
			}
			var l slog.Level
			if err := l.UnmarshalText([]byte(a.Level)); err != nil {
				return nil, fmt.Errorf("args.level: %w", err)
			}
			lv.Set(l)
			return map[string]any{"level": l.String()}, nil
		})
	}
	if b.Models != nil {
		c.Handle("list_models", func(context.Context, json.RawMessage) (any, error) {
			return map[string]any{"models": b.Models()}, nil
		})
	}
}

func strictJSON(b []byte, v any) error {
	if b == nil {
		return errors.New("no args")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

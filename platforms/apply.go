package platforms

import (
	"fmt"
	"maps"
	"strconv"

	"github.com/edgeinfer/edgeinfer/runtime/engine"
	"github.com/edgeinfer/edgeinfer/runtime/ort"
)

// affinityKey is ONNX Runtime's session config entry pinning the intra-op
// pool's threads (kOrtSessionOptionsConfigIntraOpThreadAffinities).
const affinityKey = "session.intra_op_thread_affinities"

// Choice is one setting of the version matrix: what the profile chose, what
// is in effect, and which of the two won.
type Choice struct {
	Setting string `json:"setting"`
	Profile string `json:"profile"`
	Value   string `json:"value"`
	// Source is "profile" when the profile's choice is in effect,
	// "config" when the configuration set its own (an override).
	Source string `json:"source"`
}

// Apply puts the plan onto an engine configuration. What cfg already sets
// is kept, as an override: the provider chain (Session.Providers non-nil),
// the thread count (Session.IntraOpThreads non-zero), the affinity entry
// and the KV budget (KV.BudgetBytes non-zero). The affinity is applied only
// with the profile's own thread count, since ONNX Runtime requires one
// entry per pool thread. It returns each choice and where it came from.
//
// All of the engine configuration this package touches is in this one
// function, so a change of the engine's Config is a change here.
func Apply(p Plan, cfg *engine.Config) []Choice {
	s := &cfg.Session
	if s.Providers == nil {
		s.Providers = cloneChain(p.Providers)
	}
	if s.IntraOpThreads == 0 {
		s.IntraOpThreads = p.Threads.IntraOp
		if p.Threads.Affinity != "" && s.IntraOpThreads == p.Threads.IntraOp {
			if _, set := s.ConfigEntries[affinityKey]; !set {
				if s.ConfigEntries == nil {
					s.ConfigEntries = map[string]string{}
				}
				s.ConfigEntries[affinityKey] = p.Threads.Affinity
			}
		}
	}
	if cfg.KV.BudgetBytes == 0 {
		cfg.KV.BudgetBytes = p.KV.Bytes
	}
	return Matrix(p, *cfg)
}

// Matrix lists the plan's choices against a configuration, for the
// report's version matrix: each with the profile's value, the value in
// effect and whether the configuration overrode it.
func Matrix(p Plan, cfg engine.Config) []Choice {
	s := cfg.Session
	chain := ProviderNames(s.Providers)
	if s.Providers == nil {
		chain = ProviderNames(ort.DefaultProviders())
	}
	kv := cfg.KV.BudgetBytes
	kvStr := func(b int64) string {
		if b == 0 {
			return "engine default"
		}
		return strconv.FormatInt(b, 10)
	}
	thr := func(n int) string {
		if n == 0 {
			return "ONNX Runtime default"
		}
		return strconv.Itoa(n)
	}
	aff := func(a string) string {
		if a == "" {
			return "unpinned"
		}
		return a
	}
	return []Choice{
		choice("board", p.Board, p.Board),
		choice("providers", ProviderNames(p.Providers), chain),
		choice("intra_op_threads", thr(p.Threads.IntraOp), thr(s.IntraOpThreads)),
		choice("thread_affinity", aff(p.Threads.Affinity), aff(s.ConfigEntries[affinityKey])),
		choice("kv_budget_bytes", kvStr(p.KV.Bytes), kvStr(kv)),
	}
}

func choice(setting, profile, value string) Choice {
	c := Choice{Setting: setting, Profile: profile, Value: value, Source: "profile"}
	if profile != value {
		c.Source = "config"
	}
	return c
}

func cloneChain(chain []ort.ProviderConfig) []ort.ProviderConfig {
	if chain == nil {
		return nil
	}
	out := make([]ort.ProviderConfig, len(chain))
	for i, c := range chain {
		out[i] = ort.ProviderConfig{Name: c.Name, Options: maps.Clone(c.Options)}
	}
	return out
}

// String renders a choice as one line of a text report.
func (c Choice) String() string {
	if c.Source == "config" {
		return fmt.Sprintf("%s: %s (config; profile: %s)", c.Setting, c.Value, c.Profile)
	}
	return fmt.Sprintf("%s: %s (profile)", c.Setting, c.Value)
}

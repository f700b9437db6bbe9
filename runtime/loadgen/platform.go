package loadgen

import (
	"github.com/edgeinfer/edgeinfer/platforms"
	"github.com/edgeinfer/edgeinfer/runtime/engine"
)

// Platform is the version matrix's board row: the profile detected on this
// machine, how it was recognised, and each of its choices against the
// engine configuration the run used (a setting the configuration made
// itself shows as "config", with the profile's value beside it).
type Platform struct {
	Profile      string             `json:"profile"`
	Generic      bool               `json:"generic"`
	RecognisedBy []string           `json:"recognised_by"`
	Choices      []platforms.Choice `json:"choices,omitempty"`
	Warnings     []string           `json:"warnings,omitempty"`
}

// detectPlatform chooses this machine's board from its facts (read once
// for the whole matrix); the board string is the board's own name with the
// profile's ID.
func detectPlatform(f platforms.Facts, cfg *engine.Config) (string, *Platform) {
	plan := platforms.PlanFor(f, platforms.DetectOptions{})
	p := &Platform{Profile: plan.Board, Generic: plan.Generic, RecognisedBy: plan.RecognisedBy, Warnings: plan.Warnings}
	if cfg != nil {
		p.Choices = platforms.Matrix(plan, *cfg)
	}
	board := plan.Name + " (profile " + plan.Board + ")"
	if plan.Generic {
		board += ", not a known board"
	}
	return board, p
}

package plugin

import "strings"

func containsOOM(s string) bool {
	return strings.Contains(s, "out of memory") || strings.Contains(s, "memory limit")
}

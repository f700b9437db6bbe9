//go:build !unix

package fleet

// lockDir has no cross-process lock where flock(2) is missing: there, one
// process at a time must change a repository.
func lockDir(string) (func(), error) { return func() {}, nil }

package rollout

import "errors"

// ErrConfig reports a bad Config or missing Deps.
var ErrConfig = errors.New("device: bad config")

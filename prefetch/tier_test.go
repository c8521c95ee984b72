package prefetch

import "github.com/dataccel/dataccel/cache"

// The capabilities the loader looks for in its tier, which cache.Tiered
// (the tier a mount hands it) must keep: a method renamed there would turn
// a feature off without a word.
var (
	_ indexTier  = (*cache.Tiered)(nil)
	_ peeker     = (*cache.Tiered)(nil)
	_ partReader = (*cache.Tiered)(nil)
	_ fuller     = (*cache.Tiered)(nil)
	_ toucher    = (*cache.Tiered)(nil)
	_ forgetter  = (*cache.Tiered)(nil)
	_ remover    = (*cache.Tiered)(nil)
	_ backlogger = (*cache.Tiered)(nil)
)

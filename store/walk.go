package store

import (
	"context"
	"fmt"
	"sync"

	"golang.org/x/sync/errgroup"
)

// ListAll calls fn for every object under prefix, at any depth, listing
// sub-prefixes in parallel (up to parallel LISTs in flight). A serial
// recursive listing of a large dataset is bounded by one round trip per
// page; fanning out over directories makes it bounded by parallel pages.
// fn is never called concurrently; the order of calls is unspecified.
func ListAll(ctx context.Context, s Store, prefix string, parallel int, fn func(Object) error) error {
	if parallel < 1 {
		parallel = 1
	}
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(parallel)
	var mu sync.Mutex // serializes fn
	var walk func(p string) error
	walk = func(p string) error {
		var subs []string
		err := s.List(ctx, p, false, func(o Object) error {
			if o.IsPrefix {
				subs = append(subs, o.Key)
				return nil
			}
			mu.Lock()
			defer mu.Unlock()
			return fn(o)
		})
		if err != nil {
			return fmt.Errorf("list all %q: %w", p, err)
		}
		for _, sub := range subs {
			// Run inline when every slot is taken: waiting for a slot
			// from inside a slot could deadlock.
			if !g.TryGo(func() error { return walk(sub) }) {
				if err := walk(sub); err != nil {
					return err
				}
			}
		}
		return nil
	}
	g.Go(func() error { return walk(prefix) })
	return g.Wait()
}

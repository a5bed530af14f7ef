package lease

// stopRenewing makes the keeper leave l alone, so that it expires: the
// store forgets it holds l (its trust window still ends, and cancels it).
func (l *Lease) stopRenewing() {
	k := &l.store.keeper
	k.mu.Lock()
	delete(k.held, l)
	k.mu.Unlock()
}

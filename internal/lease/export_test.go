package lease

// stopRenewing makes the keeper leave l alone, so that it expires: the
// store forgets it holds l (its trust window still ends, and cancels it).
func (l *Lease) stopRenewing() {
	l.store.mu.Lock()
	delete(l.store.held, l)
	l.store.mu.Unlock()
}

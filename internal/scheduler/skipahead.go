package scheduler

import "github.com/tickd/tickd/internal/logs"

// skip sets the entity at pos aside, for revisit.
func (f *fanOut) skip(id string, pos int) {
	f.ahead.skipped = appendAt(f.ahead.skipped, id, pos)
	if f.chunk > 0 && (pos+1)%f.chunk == 0 && f.ahead.jump > 0 {
		f.ahead.jump--
	}
}

// appendAt adds the entity at stream position pos to parts, to its last
// part when it follows it.
func appendAt(parts []skipped, id string, pos int) []skipped {
	if n := len(parts); n == 0 || parts[n-1].pos+len(parts[n-1].ids) != pos {
		parts = append(parts, skipped{pos: pos})
	}
	sk := &parts[len(parts)-1]
	sk.ids = append(sk.ids, id)
	return parts
}

// skipReserved skips an entity that already holds a run slot, and gives
// the slot back.
func (f *fanOut) skipReserved(id string, pos int) {
	<-f.ts.slots
	f.skip(id, pos)
}

// firstChunk is the index in ids of the first entity to start a chunk of n.
func (sk skipped) firstChunk(n int) int { return (n - sk.pos%n) % n }

// revisit comes back to the parts of the stream the fan-out skipped: the
// entities of chunks another replica took count as already run, the others
// are tried as any other (the replica that was ahead may have died, or be
// slower). Each round asks about all the skipped chunks in one round trip;
// one may skip again, the last does not.
func (f *fanOut) revisit() error {
	for round := 1; len(f.ahead.skipped) > 0 && f.ctx.Err() == nil; round++ {
		f.ahead.jump, f.ahead.lastRound = 0, round >= revisitRounds
		skipped := f.ahead.skipped
		f.ahead.skipped = nil
		if err := f.revisitRound(skipped); err != nil {
			return err
		}
		f.flush()
	}
	// What the fan-out sends after (its retries of the held and the
	// failed) skips nothing: no revisit would come back to it, and an
	// entity skipped then was neither sent nor counted.
	f.ahead.jump, f.ahead.lastRound = 0, true
	return nil
}

// revisitRounds bounds the rounds of revisit.
const revisitRounds = 4

func (f *fanOut) revisitRound(skipped []skipped) error {
	n := f.chunk
	if n == 0 { // a stream not cut into chunks: another replica's share set aside
		for _, sk := range skipped {
			for i, id := range sk.ids {
				if err := f.addAt(id, sk.pos+i); err != nil {
					return err
				}
			}
		}
		return nil
	}
	var names []string
	for _, sk := range skipped {
		for lo := sk.firstChunk(n); lo+n <= len(sk.ids); lo += n {
			names = append(names, chunkName(sk.ids[lo:lo+n]))
		}
	}
	taken, err := f.s.store.Taken(f.ctx, f.name, f.T, names)
	if err != nil {
		// Not knowing is no answer: the chunks are sent again, and those
		// taken are answered so.
		f.s.log.Debug("cannot read the tick's taken chunks", logs.KeyTask, f.ts.t.Name, logs.Tick(f.T), logs.KeyError, err)
		taken = nil
	}
	c := 0 // the chunk's index in names and taken
	for _, sk := range skipped {
		next := sk.firstChunk(n) // where the next whole chunk starts
		for i := 0; i < len(sk.ids); {
			if i == next && i+n <= len(sk.ids) {
				next += n
				c++
				if c <= len(taken) && taken[c-1] {
					f.n.AlreadyRan += n
					i += n
					continue
				}
			}
			if err := f.addAt(sk.ids[i], sk.pos+i); err != nil {
				return err
			}
			i++
		}
	}
	return nil
}

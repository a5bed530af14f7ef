package driver

// BatchSize bounds the entities one acquire or release round trip carries;
// callers that gather requests (the scheduler's fan-out) batch by it.
const BatchSize = 512

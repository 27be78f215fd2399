package throttle

// Library returns the engine's Redis Functions library as this version
// loads it, and the names of its decide, claim, release and failed
// functions, for tests that call them raw.
func Library() (code, decide, claim, release, failed string) {
	lib := newLibrary(nil)
	return lib.code, lib.decide, lib.claim, lib.release, lib.failed
}

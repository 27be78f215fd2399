package throttle

// Library returns the engine's Redis Functions library as this version
// loads it, and the names of its decide, claim, release and failed
// functions, for tests that call them raw.
func Library() (code, decide, claim, release, failed string) {
	lib := newLibrary(nil)
	return lib.code, lib.decide, lib.claim, lib.release, lib.failed
}

// CreditsFunctions returns the names of the library's credits, refund and
// balance functions, for tests that call them raw.
func CreditsFunctions() (credits, refund, balance string) {
	lib := newLibrary(nil)
	return lib.credits, lib.refund, lib.balance
}

// CreditsKeys returns the key of tenant's balance of credits under
// prefix, and the paid marker of its job jobID.
func CreditsKeys(prefix, tenant, jobID string) (balance, paid string) {
	k := keyspace{prefix: prefix}
	tag, _ := k.tag(tenant)
	return k.credits(tag), k.paid(tag, jobID)
}

// SettleFunction returns the name of the library's settle function, for
// tests that call it raw.
func SettleFunction() string { return newLibrary(nil).settle }

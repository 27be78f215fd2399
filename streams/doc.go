// Package streams creates or checks the JetStream streams and consumers the
// worker reads and writes: the jobs stream and its durable consumers, and the
// streams that store what the worker publishes (forwarded jobs, dead
// letters). Each Ensure function is safe to run from every worker of a fleet
// at once: a stream another worker created first is found, not an error.
package streams

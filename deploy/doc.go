// Package deploy holds no code: it is the module of the tests that check
// the deployment files beside it (kubernetes/, keda/, prometheus/,
// grafana/) with the parsers that will read them: Kubernetes' API types,
// Prometheus' rule and PromQL parsers, and a running worker's /metrics
// for the metric names the rules and the dashboard use.
//
// It is a module of its own so that the worker's module does not take
// k8s.io/api and github.com/prometheus/prometheus, large modules only
// these tests need. Its path lies under the worker's, so it may import
// the worker's internal packages (Go allows an internal package to any
// import path under its parent's, whatever the module) and run the
// worker in process against the test servers internal/testenv starts.
package deploy

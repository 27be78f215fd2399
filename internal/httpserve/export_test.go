package httpserve

// ServeWithGrace is Serve with another grace, so that a test can tell a
// stop that waited out its grace from one that did not.
var ServeWithGrace = serve

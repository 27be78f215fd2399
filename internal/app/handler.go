package app

import (
	"log/slog"
	"net/http"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/config"
	"github.com/throttler/throttler/consumer"
	"github.com/throttler/throttler/httphandler"
)

// NewHandler returns the handler THROTTLER_HANDLER names, built from the
// settings, and a function that releases what it holds (the http
// handler's idle connections), to call once the worker has stopped. The
// handler logs to log, as the worker does (a malformed Throttler-Cost).
func NewHandler(js jetstream.JetStream, cfg *Settings, log *slog.Logger) (consumer.Handler, func(), error) {
	if cfg.Handler != config.HandlerHTTP {
		return consumer.Forwarder(js, cfg.Forward), func() {}, nil
	}
	headers := http.Header{}
	for _, f := range cfg.HTTPHeaderList {
		headers.Add(f.Name, f.Value)
	}
	h, err := httphandler.New(httphandler.Options{
		URL:     cfg.HTTPURL,
		Method:  cfg.HTTPMethod,
		Timeout: cfg.HTTPTimeout,
		Headers: headers,
		Conns:   cfg.Concurrency,
		Logger:  log,
	})
	if err != nil {
		return nil, nil, err
	}
	return h.Handle, h.Close, nil
}

package admin

import (
	"bytes"
	"embed"
	"io/fs"
	"net/http"
)

// consoleFiles are the console's page and assets: plain HTML, CSS and
// JavaScript, embedded so that the console needs no network, no CDN and
// no build step.
//
//go:embed console
var consoleFiles embed.FS

// authedMarker is the page's marker that the server fills with whether
// the page's own request carried the token.
var authedMarker = []byte(`data-authed="?"`)

// consoleRoutes serves the page at / and its assets under /assets/. The
// assets hold no data and are served to anyone; the page is the same for
// everyone but says whether its request carried the token: without it,
// it answers 401 and shows only the form asking for one, and every piece
// of data it loads later needs the token.
func (s *Server) consoleRoutes() {
	assets, err := fs.Sub(consoleFiles, "console/assets")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time: a broken build, not control flow
	}
	s.mux.Handle(consoleAssets, http.StripPrefix("/assets/", http.FileServerFS(assets)))
	page, err := consoleFiles.ReadFile("console/index.html")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time: a broken build, not control flow
	}
	authed := bytes.Replace(page, authedMarker, []byte(`data-authed="1"`), 1)
	anon := bytes.Replace(page, authedMarker, []byte(`data-authed="0"`), 1)
	s.mux.HandleFunc(consolePage, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'")
		if !s.authorized(r) {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write(anon)
			return
		}
		_, _ = w.Write(authed)
	})
}

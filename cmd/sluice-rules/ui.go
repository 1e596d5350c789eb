package main

import (
	"net/http"

	"github.com/sluicelabs/sluice/cmd/sluice-rules/internal/web"
)

// uiHandler returns the web page's handler, mounted at /ui/ (the paths it
// sees keep the /ui/ prefix), or nil for none. rulescli owns this file.
func uiHandler() http.Handler { return web.Handler() }

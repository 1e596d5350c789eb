package main

import "net/http"

// uiHandler returns the web page's handler, mounted at /ui/ (the paths it
// sees keep the /ui/ prefix), or nil for none. rulescli owns this file.
func uiHandler() http.Handler { return nil }

// Package source is the contract between the agent and where its
// configurations come from: a source (a file, Kubernetes) builds whole
// validated configurations and delivers them as Updates; the agent
// applies each. Data flows one way: sources know nothing of the agent,
// the data plane or the announcements.
package source

import "github.com/xlbproject/xlb/internal/config"

// Update is a new desired configuration from a source, or the error that
// keeps the source from producing one (shown by status; the running
// configuration stays).
type Update struct {
	Config *config.Config
	Err    error
	// Source names where it came from, for the log ("file",
	// "kubernetes").
	Source string
	// Trigger says what made the source read again, for the log
	// ("SIGHUP", "file changed"); "" when the source says no more.
	Trigger string
}

// Source delivers configurations.
type Source interface {
	// Updates delivers each configuration after the first (which the
	// agent starts with), or the error that keeps the source from
	// building one. Unchanged configurations are not sent.
	Updates() <-chan Update
}

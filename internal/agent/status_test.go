package agent

import (
	"errors"
	"strings"
	"testing"

	"github.com/xlbproject/xlb/internal/api"
	"github.com/xlbproject/xlb/internal/config"
)

// TestStatusSaysWhatRuns: status tells a configuration that did not load
// (the one before it runs) from one that loaded and runs but is not fully
// applied; a failed load after a failed apply keeps the running
// configuration's retries going, and its status shows both.
func TestStatusSaysWhatRuns(t *testing.T) {
	next := baseConfig()
	var loadErr error
	a, f, _ := testAgent(t, cfgOf(baseConfig().Services[0]), func(string) (*config.Config, error) { return next, loadErr })

	// Loaded, applied in part: the new configuration runs.
	f.failKey[1] = errInjected // dns will get service ID 1
	if err := reload(a); !errors.Is(err, errInjected) {
		t.Fatalf("err = %v, want the injected error", err)
	}
	st := status(t, a)
	if st.Config.Result != api.ResultError || st.Config.LoadError != "" || !strings.Contains(st.Config.ApplyError, errInjected.Error()) ||
		len(st.Services) != 2 || st.Config.Generation != 2 {
		t.Errorf("after a failed apply: %+v, %d services", st.Config, len(st.Services))
	}

	// A file that does not load: the partly applied one keeps running,
	// and is still retried.
	loadErr = errors.New("test.yaml:3: services[0].port: must be 1-65535")
	if err := reload(a); err == nil {
		t.Fatal("a broken file loaded")
	}
	st = status(t, a)
	if st.Config.LoadError != loadErr.Error() || !strings.Contains(st.Config.ApplyError, errInjected.Error()) ||
		st.Config.Error != st.Config.LoadError+"\n"+st.Config.ApplyError {
		t.Errorf("after a failed load: %+v", st.Config)
	}
	delete(f.failKey, 1)
	a.retryEvery = 0
	a.retry()
	st = status(t, a)
	if st.Config.ApplyError != "" || st.Config.LoadError != loadErr.Error() || !st.Services[1].Installed {
		t.Errorf("after the retry: %+v, dns installed %v", st.Config, st.Services[1].Installed)
	}

	// A file that loads: all clear.
	loadErr = nil
	if err := reload(a); err != nil {
		t.Fatal(err)
	}
	if st := status(t, a); st.Config.Result != api.ResultOK || st.Config.Error != "" || st.Config.LoadError != "" || st.Config.ApplyError != "" {
		t.Errorf("after a good reload: %+v", st.Config)
	}
}

// TestStatusConntrack: the status reports the conntrack table's fill and
// size as the data plane does, and fails rather than report a fill it
// could not read.
func TestStatusConntrack(t *testing.T) {
	a, f, _ := testAgent(t, baseConfig(), nil)
	f.mu.Lock()
	f.ctFlows, f.ctSize = 1200, 4096
	f.mu.Unlock()
	if st := status(t, a); st.Conntrack != (api.Conntrack{Flows: 1200, Size: 4096}) {
		t.Errorf("conntrack %+v, want 1200 flows of 4096", st.Conntrack)
	}
	f.mu.Lock()
	f.fail["ConntrackEntries"] = errInjected
	f.mu.Unlock()
	if _, err := a.Status(); !errors.Is(err, errInjected) {
		t.Errorf("err = %v, want the data plane's error", err)
	}
}

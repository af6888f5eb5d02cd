package mem

import (
	"context"
	"math"
	"net/url"

	"github.com/sluicemq/sluice/adapters"
	"github.com/sluicemq/sluice/ports"
)

// mem:// opens an adapter on the process's default in-process broker
// (Default): "mem://", "mem://?namespace=svc", "mem://?max_queue=50000"
// (WithMaxQueue). It takes no host, path, credentials or TLS.
func init() {
	adapters.Register("mem", adapters.OpenerFunc(openMem))
}

func openMem(_ context.Context, u *url.URL, cfg *adapters.Config) (ports.Adapter, error) {
	if u.Host != "" || (u.Path != "" && u.Path != "/") {
		return nil, &adapters.ParamError{Param: "host", Reason: "mem:// names the process's in-process broker and takes no host or path (write mem:// or mem://?namespace=svc)"}
	}
	if err := cfg.NoCredentials(); err != nil {
		return nil, err
	}
	if err := cfg.PlainOnly(""); err != nil {
		return nil, err
	}
	opts := []Option{WithMaxQueue(cfg.Params.Int("max_queue", DefaultMaxQueue, 0, math.MaxInt))}
	if err := cfg.Params.Err("max_queue"); err != nil {
		return nil, err
	}
	if cfg.Namespace != "" {
		opts = append(opts, WithNamespace(cfg.Namespace))
	}
	return Open(opts...)
}

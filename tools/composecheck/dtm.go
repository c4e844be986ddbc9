package main

import (
	"errors"
	"fmt"
	"path"
	"strings"

	"github.com/compose-spec/compose-go/v2/types"
)

// dtmImage is the image of DTM's server.
const dtmImage = "yedf/dtm"

// checkDTMStore checks that every DTM server keeps its store beyond its container: DTM's MySQL (or
// Postgres, Redis) store, or the boltdb file (dtm.bolt, written in the working directory) on a named
// volume or a bind mount. A DTM whose boltdb file lives in the container forgets the global
// transactions in flight, and the gids the reconciler fenced, when the container is recreated.
func checkDTMStore(p *types.Project) error {
	var errs []error
	for _, name := range sortedNames(p) {
		s := p.Services[name]
		if imageName(s.Image) != dtmImage {
			continue
		}
		driver := "boltdb" // DTM's default
		if v, ok := s.Environment["STORE_DRIVER"]; ok && v != nil {
			driver = strings.ToLower(*v)
		}
		if driver != "boltdb" {
			continue // a database store outlives the container
		}
		dir := s.WorkingDir
		if dir == "" {
			errs = append(errs, fmt.Errorf("service %q: DTM's boltdb store is written in its working directory: set working_dir to a mounted volume (or use STORE_DRIVER=mysql)", name))
			continue
		}
		if !mounted(s, dir) {
			errs = append(errs, fmt.Errorf("service %q: DTM's boltdb store (%s/dtm.bolt) is not on a volume: recreating the container loses the transactions in flight", name, dir))
		}
	}
	return errors.Join(errs...)
}

// mounted reports whether dir in s's container is a volume or bind mount, or lies under one.
func mounted(s types.ServiceConfig, dir string) bool {
	dir = path.Clean(dir)
	for _, v := range s.Volumes {
		if v.Type != types.VolumeTypeVolume && v.Type != types.VolumeTypeBind {
			continue
		}
		t := path.Clean(v.Target)
		if dir == t || strings.HasPrefix(dir, t+"/") {
			return true
		}
	}
	return false
}

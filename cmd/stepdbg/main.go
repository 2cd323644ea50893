package main

import (
	"fmt"
	"os"
	"strconv"

	"github.com/batchfit/batchfit/models"
	"github.com/batchfit/batchfit/profile"
	"github.com/batchfit/batchfit/trace"
	"github.com/batchfit/batchfit/train"
)

func main() {
	name := os.Args[1]
	b, _ := strconv.Atoi(os.Args[2])
	img, _ := strconv.Atoi(os.Args[3])
	step, _ := strconv.Atoi(os.Args[4])
	ph := os.Args[5]
	g, _, err := models.Build(name, models.Config{Batch: int64(b), Image: int64(img)})
	if err != nil {
		panic(err)
	}
	prof, _ := profile.Lookup("1.13")
	tr, _, err := train.Simulate(g, train.Setup{CPU: true, Profile: prof, Steps: 2, Optimizer: train.Optimizer{Kind: train.SGD, Momentum: 0.9, Impl: train.ForLoop}})
	if err != nil {
		panic(err)
	}
	sizes := map[int64]int64{}
	var live, peak int64
	cur := ""
	flush := func() {
		if cur != "" {
			fmt.Println(cur, live, peak)
		}
	}
	for _, e := range tr.Events {
		prev := live
		switch e.Action {
		case trace.Alloc:
			sizes[e.ID] = e.Size
			live += e.Size
		case trace.Free:
			live -= sizes[e.ID]
		default:
			continue
		}
		if int(e.Step) == step && e.Phase.String() == ph {
			if n := tr.SiteName(e.Site); n != cur {
				l := live
				live = prev
				flush()
				live = l
				cur, peak = n, prev
			}
			peak = max(peak, live)
		}
	}
	flush()
}

package report

import (
	"fmt"

	"github.com/tickd/tickd/config"
)

// DescribeSource says where a task's entities come from, in a few words.
func DescribeSource(t config.Task) string {
	switch {
	case t.Entities != nil:
		return fmt.Sprintf("%d static entities", len(t.Entities))
	case t.EntitiesFile != "":
		return "entities from " + t.EntitiesFile
	case t.EntitiesCommand != nil:
		return fmt.Sprintf("entities from command %q", t.EntitiesCommand[0])
	}
	return "singleton"
}
